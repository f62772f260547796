#!/usr/bin/env bash
# The real-agent suite: Codex's ACP adapter (@zed-industries/codex-acp, from the npm
# registry) behind `sessionstore proxy`, against the loopback model server of this
# folder. It checks that the final model request carries each attachment's absolute
# path and that reading it returns the original bytes (image, text and binary file),
# before and after a restart with the attachment root moved. See README.md.
#
#   bash tests/real-agent/run.sh
#
# Needs cargo, node (20 or newer) and npm. The network is used once, to install the
# adapter from the npm registry into target/real-agent/ (REAL_AGENT_CACHE moves it);
# after that everything runs on 127.0.0.1. The run's files (database, attachment roots,
# CODEX_HOME, logs) go to a fresh folder under target/real-agent/runs/, removed when
# every check passed unless REAL_AGENT_KEEP=1. Exit status: 0 when every check passed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
CACHE="${REAL_AGENT_CACHE:-$TARGET/real-agent}"
ADAPTER_VERSION="$(node -p "require('$HERE/package.json').dependencies['@zed-industries/codex-acp']")"

for tool in cargo node npm; do
  command -v "$tool" >/dev/null || { echo "real-agent: $tool is needed and not on PATH" >&2; exit 2; }
done

# ---- the proxy ----
echo "== building sessionstore"
cargo build --manifest-path "$REPO/Cargo.toml" --bin sessionstore
SESSIONSTORE="$TARGET/debug/sessionstore"

# ---- the adapter, installed once into the cache folder ----
# The platform package holds the real binary; it is run directly, not through the Node
# launcher, which neither forwards signals nor exits with its child.
adapter_binary() {
  (cd "$CACHE" && node -e '
    const pkg = `@zed-industries/codex-acp-${process.platform}-${process.arch}`;
    const bin = process.platform === "win32" ? "codex-acp.exe" : "codex-acp";
    try {
      const dir = require("path").dirname(require.resolve(`${pkg}/package.json`));
      if (require(`${pkg}/package.json`).version !== process.argv[1]) process.exit(1);
      console.log(require("path").join(dir, "bin", bin));
    } catch { process.exit(1); }
  ' "$ADAPTER_VERSION") 2>/dev/null
}
mkdir -p "$CACHE"
if ! CODEX_ACP="$(adapter_binary)" || [[ ! -x "$CODEX_ACP" ]]; then
  echo "== installing @zed-industries/codex-acp@$ADAPTER_VERSION into $CACHE"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$CACHE/"
  (cd "$CACHE" && npm ci --no-audit --no-fund --ignore-scripts)
  CODEX_ACP="$(adapter_binary)" || { echo "real-agent: no codex-acp binary for this platform after the install" >&2; exit 1; }
fi
echo "== agent: $CODEX_ACP"

# ---- a fresh run folder ----
mkdir -p "$CACHE/runs"
RUN="$(mktemp -d "$CACHE/runs/run.XXXXXX")"
DB="$RUN/sessions.db"
ROOT="$RUN/attachments"
MOVED="$RUN/moved/attachments"
REQUESTS="$RUN/model-requests.jsonl"
export CODEX_HOME="$RUN/codex-home"
mkdir -p "$CODEX_HOME"
: > "$REQUESTS"
echo "== run folder: $RUN"

SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

# ---- the model server on loopback ----
node "$HERE/model-server.mjs" --log "$REQUESTS" --port-file "$RUN/port" --max-seconds 600 \
  > "$RUN/model-server.out" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do [[ -s "$RUN/port" ]] && break; sleep 0.1; done
[[ -s "$RUN/port" ]] || { echo "real-agent: the model server did not start:" >&2; cat "$RUN/model-server.out" >&2; exit 1; }
PORT="$(cat "$RUN/port")"
echo "== model server: http://127.0.0.1:$PORT (pid $SERVER_PID)"

# ---- CODEX_HOME: the loopback provider and nothing that reaches out ----
# A user-defined provider needs no login; retries are off so that a failure shows at
# once; no update check, analytics, feedback or telemetry, no web search tool, no
# login-shell snapshot; tools run unsandboxed (bubblewrap is not needed) and never
# ask for approval.
cat > "$CODEX_HOME/config.toml" <<EOF
model = "gpt-5.4-mini"
model_provider = "loopback"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"
allow_login_shell = false

[analytics]
enabled = false

[feedback]
enabled = false

[history]
persistence = "none"

[otel]
exporter = "none"

[features]
shell_snapshot = false
goals = false
multi_agent = false
memories = false
apps = false
plugins = false

[skills.bundled]
enabled = false

[model_providers.loopback]
name = "loopback"
base_url = "http://127.0.0.1:$PORT/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 30000
EOF

# The agent gets no keys and no proxy settings: it has nothing to reach but 127.0.0.1.
agent_env=(env -u OPENAI_API_KEY -u CODEX_API_KEY -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY
  -u http_proxy -u https_proxy -u all_proxy NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost)

status=0

echo "== 1. a session and a prompt with an image, a text file and a binary file"
"${agent_env[@]}" node "$HERE/client.mjs" first --run "$RUN" --root "$ROOT" --requests "$REQUESTS" \
  -- "$SESSIONSTORE" proxy --db "$DB" --attachments-root "$ROOT" -- "$CODEX_ACP" || status=1

echo "== 2. the attachment root moved to $MOVED"
mkdir -p "$(dirname "$MOVED")"
if [[ -d "$ROOT" ]] && mv "$ROOT" "$MOVED"; then
  echo "ok   the root moved; nothing is left at $ROOT"
else
  echo "FAIL the root moved: there was no $ROOT"
  status=1
fi

echo "== 3. the proxy started again on the moved root: session/load, then a second prompt"
"${agent_env[@]}" node "$HERE/client.mjs" second --run "$RUN" --root "$MOVED" --old-root "$ROOT" \
  --requests "$REQUESTS" \
  -- "$SESSIONSTORE" proxy --db "$DB" --attachments-root "$MOVED" -- "$CODEX_ACP" || status=1

echo "== 4. the store after both runs"
if "$SESSIONSTORE" verify --db "$DB" --attachments-root "$MOVED" > "$RUN/verify.out" 2>&1; then
  echo "ok   sessionstore verify finds no problem"
else
  echo "FAIL sessionstore verify: $(tr '\n' ' ' < "$RUN/verify.out")"
  status=1
fi

echo "== model requests recorded: $(grep -c '"path":"/v1/responses"' "$REQUESTS" || true)"
cleanup
SERVER_PID=""
if [[ $status -eq 0 ]]; then
  if [[ "${REAL_AGENT_KEEP:-0}" == 1 ]]; then
    echo "== PASS (run folder kept: $RUN)"
  else
    rm -rf "$RUN"
    echo "== PASS"
  fi
else
  echo "== FAIL (logs in $RUN: first.*, second.*, model-requests.jsonl)"
fi
exit "$status"
