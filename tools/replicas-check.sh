#!/usr/bin/env bash
# Two estream serve replicas behind nginx, under the official OpenAI Python client:
# tests/replicas_client.py sends concurrent completions (echo, logprobs), embeddings and chat
# completions (max_tokens 1, logprobs, top_logprobs 5) through nginx and asserts each answer
# equals a single reference server's answer to the same request (all but "id" and "created"),
# that the replicas' /metrics count exactly the requests sent and both served some; then sends
# the first replica SIGTERM in the middle of a run (every request must still be answered, and
# equal, with the client's retries off: nginx passes what the stopping replica refuses to the
# other), and once it has exited, that the second answers everything. The stopped replica must
# exit 0 (it answers its requests in flight first).
#
# usage: bash tools/replicas-check.sh [BUILD_DIR]   (default build; BUILD_DIR/estream is used,
#                                                    made first with make BUILD=BUILD_DIR)
# environment:
#   ESTREAM_VENV_DIR  the virtualenv with openai and numpy, shared with tools/openai-check.sh
#                     (its pinned requirements; default $HOME/.cache/estream/venv-openai)
#   PYTHON            the interpreter that makes the virtualenv (default python3)
#
# nginx: used from PATH (or /usr/sbin); when missing it is installed from Debian (nginx-light)
# if this runs as root or with sudo, which on a machine with systemd also starts the system's
# nginx service (on port 80; this check never uses it). It runs here in the foreground
# (daemon off) as the current user, with its configuration, pid file, logs and temporary files
# in a temporary folder, on a free port of 127.0.0.1. The essentials of the configuration
# (docs/serve.md "Replicas behind a load balancer"): an upstream of the two replicas (round
# robin, kept-alive connections: proxy_http_version 1.1 and an empty Connection header),
# proxy_next_upstream error timeout http_503 non_idempotent (estream's POSTs only read the model,
# so passing one to the other replica is safe, and a draining replica answers 503), long read
# timeouts (a prefill under a memory budget may take minutes), request buffering on (the
# default: a body must be whole to be sent again).
# Prints "replicas: N checks passed" and exits 0, or says what failed and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build}
venv=${ESTREAM_VENV_DIR:-${HOME:-/root}/.cache/estream/venv-openai}
# the OpenAI check's pinned requirements, so that the two share one cached virtualenv
reqs=$(sed -n 's/^reqs="\(.*\)"$/\1/p' tools/openai-check.sh)
say() { echo "replicas-check: $*" >&2; }
die() { say "$*"; exit 1; }
[ -n "$reqs" ] || die "no reqs=\"...\" line in tools/openai-check.sh"

# ---- nginx (installed when missing) ----
nginx=$(command -v nginx || true)
[ -n "$nginx" ] || { [ -x /usr/sbin/nginx ] && nginx=/usr/sbin/nginx; } || true
if [ -z "$nginx" ]; then
    command -v apt-get >/dev/null || die "no nginx, and no apt-get to install it"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo -n true 2>/dev/null || die "no nginx: install it (apt-get install nginx-light)," \
            "or run this as root"
        sudo="sudo -n"
    fi
    say "installing nginx-light (Debian)"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed"
    $sudo apt-get install -y -qq --no-install-recommends nginx-light >/dev/null 2>&1 ||
        die "apt-get install nginx-light failed"
    nginx=$(command -v nginx || echo /usr/sbin/nginx)
    [ -x "$nginx" ] || die "nginx-light installed no nginx"
fi

# ---- the virtualenv (once), the binary, the model ----
. tools/venv.sh
cached_venv "$venv" "$reqs"
py=$venv/bin/python
if [ ! -x "$build/estream" ]; then
    say "building $build/estream"
    make BUILD="$build" -j"$(nproc)" "$build/estream" >/dev/null
fi
estream=$build/estream
vocab=${ESTREAM_DATA:-$root/../shared/data}/vocab/ggml-vocab-llama-spm.gguf
[ -f "$vocab" ] || die "no $vocab (set ESTREAM_DATA to the shared data folder)"
tmp=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.2
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
model=$tmp/chat-spm.gguf
"$estream" synth --preset tiny --type q4_0 --vocab "$vocab" \
    --chat-template tests/data/chat/mixtral-8x7b-instruct.jinja -o "$model" >/dev/null 2>&1 ||
    die "estream synth failed"

# ---- three servers: two replicas and the reference ----
start() { # name -> starts estream serve, sets $started_pid and $started_port
    local name=$1 port=
    : >"$tmp/$name.err" # before the server's redirection opens it: the sed below must find it
    "$estream" serve -m "$model" --port 0 -t 1 2>"$tmp/$name.err" &
    started_pid=$!
    pids+=("$started_pid")
    for _ in $(seq 200); do
        port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p' \
            "$tmp/$name.err" | head -1)
        [ -n "$port" ] && break
        kill -0 "$started_pid" 2>/dev/null ||
            { cat "$tmp/$name.err" >&2; die "$name: estream serve exited"; }
        sleep 0.05
    done
    [ -n "$port" ] || { cat "$tmp/$name.err" >&2; die "$name: no 'listening on' line"; }
    started_port=$port
}
healthy() { # url... -> waits for 200 from each /health
    "$py" - "$@" <<'EOF'
import sys, time, urllib.request, urllib.error
for url in sys.argv[1:]:
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    else:
        sys.exit("%s/health never answered 200" % url)
EOF
}
start replica1; r1_pid=$started_pid r1_port=$started_port
start replica2; r2_port=$started_port
start reference; ref_port=$started_port
healthy "http://127.0.0.1:$r1_port" "http://127.0.0.1:$r2_port" "http://127.0.0.1:$ref_port" ||
    die "a server did not become healthy"

# ---- nginx in front of the replicas ----
ng=$tmp/nginx
mkdir -p "$ng"
nginx_conf() { # the configuration for $lb_port
    local user_line=""
    [ "$(id -u)" -ne 0 ] || user_line="user $(id -un) $(id -gn);" # as root: not nobody
    cat >"$ng/nginx.conf" <<EOF
$user_line
daemon off;
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/error.log warn;
events { worker_connections 256; }
http {
    # the client reads which replicas each request went to
    log_format upstreams '\$request_uri \$status upstream \$upstream_addr \$upstream_status';
    access_log $ng/access.log upstreams;
    client_body_temp_path $ng/client_body;
    proxy_temp_path $ng/proxy;
    fastcgi_temp_path $ng/fastcgi;
    uwsgi_temp_path $ng/uwsgi;
    scgi_temp_path $ng/scgi;
    upstream estream {
        # round robin; a replica that fails is left alone for fail_timeout
        server 127.0.0.1:$r1_port max_fails=1 fail_timeout=30s;
        server 127.0.0.1:$r2_port max_fails=1 fail_timeout=30s;
        keepalive 16;
    }
    server {
        listen 127.0.0.1:$lb_port;
        client_max_body_size 32m;            # estream serve's --max-body
        location / {
            proxy_pass http://estream;
            proxy_http_version 1.1;          # kept-alive connections to the replicas
            proxy_set_header Connection "";
            proxy_connect_timeout 2s;
            proxy_send_timeout 600s;
            proxy_read_timeout 600s;         # a prefill under --mem may take minutes
            # a refused connection, or a 503 from a replica that is loading or stopping, goes
            # to the other replica, POSTs included: estream's requests only read the model
            proxy_next_upstream error timeout http_503 non_idempotent;
            proxy_next_upstream_tries 2;
        }
    }
}
EOF
}
nginx_pid=
for _ in 1 2 3; do # a free port now; nginx binds it next, and may lose that race
    lb_port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
    nginx_conf
    "$nginx" -p "$ng" -c "$ng/nginx.conf" -e "$ng/error.log" 2>"$tmp/nginx.err" &
    nginx_pid=$!
    pids+=("$nginx_pid")
    sleep 0.3
    kill -0 "$nginx_pid" 2>/dev/null && break
    grep -q "Address already in use" "$ng/error.log" "$tmp/nginx.err" 2>/dev/null ||
        { cat "$tmp/nginx.err" "$ng/error.log" >&2 || true; die "nginx exited"; }
done
healthy "http://127.0.0.1:$lb_port" ||
    { cat "$tmp/nginx.err" "$ng/error.log" >&2 || true; die "nginx did not answer"; }

# ---- the client ----
rc=0
"$py" tests/replicas_client.py --lb "http://127.0.0.1:$lb_port" --ref "http://127.0.0.1:$ref_port" \
    --replica "http://127.0.0.1:$r1_port" --replica "http://127.0.0.1:$r2_port" \
    --stop-pid "$r1_pid" --access-log "$ng/access.log" || rc=$?
if [ "$rc" -ne 0 ]; then
    say "nginx's error log:"; tail -20 "$ng/error.log" >&2 || true
    die "the client checks failed (exit $rc)"
fi
src=0
wait "$r1_pid" || src=$? # the client saw it exit
if [ "$src" -ne 0 ]; then
    cat "$tmp/replica1.err" >&2
    die "the first replica exited $src after SIGTERM (expected 0)"
fi
