# Sourced by the scripts that need a Python virtualenv from PyPI (tools/openai-check.sh,
# tools/python-check.sh, tools/lmeval-check.sh, bench/lmeval_vs_score.sh):
#   cached_venv DIR "REQUIREMENTS"
# makes DIR with `$PYTHON -m venv` (default python3) and pip-installs the requirements, once: a
# stamp file (DIR/.estream-complete) holding the requirements marks it complete, and a DIR whose
# stamp differs (or is missing: an interrupted run) is made again. Fails through the caller's
# die() with what to do (python3-venv missing, PyPI unreachable).
cached_venv() {
    local venv=$1 reqs=$2 python=${PYTHON:-python3}
    local stamp=$venv/.estream-complete
    if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$reqs" ]; then
        return 0
    fi
    command -v "$python" >/dev/null || die "no $python on PATH (install python3, 3.9 or newer)"
    say "making the virtualenv $venv ($reqs, from PyPI)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    if ! "$python" -m venv "$venv" >"$venv.log" 2>&1; then
        cat "$venv.log" >&2
        rm -rf "$venv" "$venv.log"
        die "'$python -m venv' does not work here; on Debian or Ubuntu install python3-venv" \
            "(apt-get install python3-venv) and run this again"
    fi
    # shellcheck disable=SC2086 # $reqs is a list of requirements
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q $reqs >>"$venv.log" 2>&1; then
        tail -20 "$venv.log" >&2
        rm -rf "$venv" "$venv.log"
        die "pip could not install $reqs (is PyPI reachable?)"
    fi
    printf '%s' "$reqs" >"$stamp"
    rm -f "$venv.log"
}
