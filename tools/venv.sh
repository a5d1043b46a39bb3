# Sourced by the scripts that need a Python virtualenv from PyPI (tools/openai-check.sh,
# tools/python-check.sh, tools/lmeval-check.sh, tools/ray-check.sh, bench/lmeval_vs_score.sh):
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

#   package_venv CACHED_VENV DIR BUILD
# makes DIR, a fresh virtualenv without pip that sees the cached one's packages (a .pth line:
# no download), and installs ./python into it with the cached pip, bundling BUILD's library:
# the package as a user's pip install makes it. Fails through the caller's die().
package_venv() {
    local venv=$1 dir=$2 build=$3 site cached
    "$venv/bin/python" -m venv --without-pip "$dir" >/dev/null || die "cannot make a virtualenv in $dir"
    site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cached=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$cached" >"$site/estream-check-cached.pth"
    say "pip install ./python (fresh virtualenv $dir)"
    if ! ESTREAM_BUILD_DIR=$build "$venv/bin/python" -m pip --python "$dir/bin/python" install \
            --disable-pip-version-check --no-build-isolation --no-deps -q ./python >"$dir.pip.log" 2>&1; then
        tail -30 "$dir.pip.log" >&2
        die "pip install ./python failed"
    fi
    rm -rf python/build python/estream.egg-info # the in-place build's leftovers
}
