#!/usr/bin/env bash
# The real-agent suite: the current ACP adapters of Codex (@agentclientprotocol/codex-acp)
# and Claude (@agentclientprotocol/claude-agent-acp), pinned, from the npm registry, each
# behind `sessionstore proxy` and against a recording model server on loopback (the
# OpenAI Responses API for Codex, the Anthropic Messages API for Claude). It checks that
# the final model request carries each attachment's absolute path and that reading it
# returns the original bytes (image, text and binary file), before and after a restart
# with the attachment root moved; and, through each agent, titles, a fork at a session
# cursor, archive and unarchive. See README.md.
#
#   bash tests/real-agent/run.sh [codex] [claude]     (both when none is named;
#                                                      REAL_AGENT="codex" does the same)
#
# Needs cargo, node (20 or newer) and npm. The network is used once per adapter, to
# install it from the npm registry into target/real-agent/AGENT/ (REAL_AGENT_CACHE moves
# it); after that everything runs on 127.0.0.1. The run's files (database, attachment
# roots, agent homes, logs) go to a fresh folder under target/real-agent/runs/, removed
# when every check passed unless REAL_AGENT_KEEP=1. Exit status: 0 when every check of
# every agent passed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
CACHE="${REAL_AGENT_CACHE:-$TARGET/real-agent}"
PHASE_SECONDS="${REAL_AGENT_PHASE_SECONDS:-180}"

if [[ $# -gt 0 ]]; then
  AGENTS=("$@")
else
  read -r -a AGENTS <<< "${REAL_AGENT:-codex claude}"
fi
for agent in "${AGENTS[@]}"; do
  case "$agent" in
    codex | claude) ;;
    *) echo "real-agent: unknown agent $agent (codex or claude)" >&2; exit 2 ;;
  esac
done

for tool in cargo node npm; do
  command -v "$tool" >/dev/null || { echo "real-agent: $tool is needed and not on PATH" >&2; exit 2; }
done

# ---- the proxy ----
echo "== building sessionstore"
cargo build --manifest-path "$REPO/Cargo.toml" --bin sessionstore
SESSIONSTORE="$TARGET/debug/sessionstore"

# ---- a fresh run folder ----
mkdir -p "$CACHE/runs"
RUN="$(mktemp -d "$CACHE/runs/run.XXXXXX")"
echo "== run folder: $RUN"

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT

# ---- the adapters, each installed once into its cache folder ----
# package.json and package-lock.json of tests/real-agent/AGENT pin it; `npm ci` runs no
# install scripts (each adapter finds its platform binary in an optional dependency).
package_of() {
  case "$1" in
    codex) echo "@agentclientprotocol/codex-acp" ;;
    claude) echo "@agentclientprotocol/claude-agent-acp" ;;
  esac
}
installed_version() {
  (cd "$CACHE/$1" && node -p "require('$2/package.json').version") 2>/dev/null
}
install_adapter() {
  local agent="$1" package version
  package="$(package_of "$agent")"
  version="$(node -p "require('$HERE/$agent/package.json').dependencies['$package']")"
  mkdir -p "$CACHE/$agent"
  if [[ "$(installed_version "$agent" "$package")" != "$version" ]] \
    || ! cmp -s "$HERE/$agent/package-lock.json" "$CACHE/$agent/package-lock.json"; then
    echo "== installing $package@$version into $CACHE/$agent"
    cp "$HERE/$agent/package.json" "$HERE/$agent/package-lock.json" "$CACHE/$agent/"
    (cd "$CACHE/$agent" && npm ci --no-audit --no-fund --ignore-scripts) || return 1
  fi
  echo "== agent: $package@$(installed_version "$agent" "$package")"
}

# The platform's Codex binary (run by the adapter without the Node launcher of
# @openai/codex in between).
codex_binary() {
  (cd "$CACHE/codex" && node -e '
    const path = require("path"), fs = require("fs");
    const base = path.dirname(require.resolve(`@openai/codex-${process.platform}-${process.arch}/package.json`));
    const exe = process.platform === "win32" ? "codex.exe" : "codex";
    for (const triple of fs.readdirSync(path.join(base, "vendor"))) {
      const bin = path.join(base, "vendor", triple, "bin", exe);
      if (fs.existsSync(bin)) { console.log(bin); process.exit(0); }
    }
    process.exit(1);
  ') 2>/dev/null
}

# ---- each agent's home: the loopback model and nothing that reaches out ----
# Codex: a user-defined provider needs no login; retries are off so that a failure
# shows at once; no update check, analytics, feedback or telemetry, no web search tool,
# no login-shell snapshot; tools run unsandboxed (bubblewrap is not needed) and never
# ask for approval.
codex_home() {
  local home="$1" port="$2"
  mkdir -p "$home"
  cat > "$home/config.toml" <<EOF
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
base_url = "http://127.0.0.1:$port/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 30000
EOF
}

# Claude: a fresh config folder and HOME, the loopback server as its API with a dummy
# key, and no nonessential traffic (telemetry, error reports, update checks, feedback
# surveys, the plugin marketplace), no suggestions of what to type next. The model asks
# for no tool, so no permission is asked either.
claude_home() {
  local home="$1"
  mkdir -p "$home/home" "$home/config"
  cat > "$home/config/settings.json" <<'EOF'
{ "autoUpdates": false }
EOF
}

run_agent() {
  local agent="$1" dir="$RUN/$1" status=0 port adapter
  local root="$dir/attachments" moved="$dir/moved/attachments" requests="$dir/model-requests.jsonl"
  local db="$dir/sessions.db"
  mkdir -p "$dir/tmp"
  : > "$requests"

  install_adapter "$agent" || { echo "FAIL $agent: the adapter installs"; return 1; }

  # The model server on loopback.
  node "$HERE/model-server.mjs" --log "$requests" --port-file "$dir/port" --max-seconds 900 \
    > "$dir/model-server.out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  if [[ ! -s "$dir/port" ]]; then
    echo "FAIL $agent: the model server starts: $(cat "$dir/model-server.out")"
    stop_server
    return 1
  fi
  port="$(cat "$dir/port")"
  echo "== $agent: model server http://127.0.0.1:$port (pid $SERVER_PID)"

  # The agent gets no real keys; its only proxy is the model server, which records and
  # refuses whatever is meant for beyond loopback. Its temporary files stay in the run
  # folder, and git finds no repository above it (the run folder is in this one).
  local -a agent_env=(env -u OPENAI_API_KEY -u CODEX_API_KEY -u ANTHROPIC_API_KEY -u ANTHROPIC_AUTH_TOKEN
    -u CLAUDE_CODE_OAUTH_TOKEN -u IS_SANDBOX -u ALL_PROXY -u all_proxy
    "HTTP_PROXY=http://127.0.0.1:$port" "HTTPS_PROXY=http://127.0.0.1:$port"
    "http_proxy=http://127.0.0.1:$port" "https_proxy=http://127.0.0.1:$port"
    NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
    "TMPDIR=$dir/tmp" "GIT_CEILING_DIRECTORIES=$dir")
  # Each adapter runs as an install runs it, by its bin link (a Node script), so the
  # store keeps the agent's name (`codex-acp`, `claude-agent-acp`) beside its sessions.
  local -a command
  case "$agent" in
    codex)
      local binary
      binary="$(codex_binary)" || { echo "FAIL codex: a codex binary for this platform after the install"; stop_server; return 1; }
      codex_home "$dir/codex-home" "$port"
      # The adapter sets each session's sandbox and approvals from its mode, over
      # config.toml: "agent-full-access" is danger-full-access with approvals never.
      agent_env+=("CODEX_HOME=$dir/codex-home" "CODEX_PATH=$binary" NO_BROWSER=1
        INITIAL_AGENT_MODE=agent-full-access)
      command=("$CACHE/codex/node_modules/.bin/codex-acp")
      ;;
    claude)
      claude_home "$dir/claude-home"
      agent_env+=("HOME=$dir/claude-home/home" "CLAUDE_CONFIG_DIR=$dir/claude-home/config"
        "ANTHROPIC_BASE_URL=http://127.0.0.1:$port" ANTHROPIC_API_KEY=sk-ant-loopback-not-a-key
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1
        DISABLE_ERROR_REPORTING=1 DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1
        CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL=1 CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1
        CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION=false NO_BROWSER=1 CLAUDE_AGENT_ACP_PROTOCOL=v1)
      command=("$CACHE/claude/node_modules/.bin/claude-agent-acp")
      ;;
  esac

  echo "== $agent 1. a session and a prompt with an image, a text file and a binary file"
  "${agent_env[@]}" node "$HERE/client.mjs" first --agent "$agent" --run "$dir" --root "$root" \
    --requests "$requests" --timeout-s "$PHASE_SECONDS" \
    -- "$SESSIONSTORE" proxy --db "$db" --attachments-root "$root" -- "${command[@]}" || status=1

  echo "== $agent 2. the attachment root moved to $moved"
  mkdir -p "$(dirname "$moved")"
  if [[ -d "$root" ]] && mv "$root" "$moved"; then
    echo "ok   the root moved; nothing is left at $root"
  else
    echo "FAIL the root moved: there was no $root"
    status=1
  fi

  echo "== $agent 3. the proxy started again on the moved root: load, a second prompt, title, fork at a cursor, archive"
  "${agent_env[@]}" node "$HERE/client.mjs" second --agent "$agent" --run "$dir" --root "$moved" --old-root "$root" \
    --requests "$requests" --timeout-s "$PHASE_SECONDS" \
    -- "$SESSIONSTORE" proxy --db "$db" --attachments-root "$moved" -- "${command[@]}" || status=1

  echo "== $agent 4. the store after both runs, and what the model server saw"
  if "$SESSIONSTORE" verify --db "$db" --attachments-root "$moved" > "$dir/verify.out" 2>&1; then
    echo "ok   sessionstore verify finds no problem"
  else
    echo "FAIL sessionstore verify: $(tr '\n' ' ' < "$dir/verify.out")"
    status=1
  fi
  # The session as the store keeps it: bound to the agent by its name and to the agent's
  # own session, the one its model requests named.
  local expected_name
  case "$agent" in codex) expected_name=codex-acp ;; claude) expected_name=claude-agent-acp ;; esac
  if [[ ! -s "$dir/state.json" ]]; then
    echo "FAIL sessionstore session show of the first session: the first phase left no session"
    status=1
  elif "$SESSIONSTORE" session show --json --db "$db" --attachments-root "$moved" \
      "$(node -p "require('$dir/state.json').sessionId")" > "$dir/show.json" 2> "$dir/show.err"; then
    node -e '
      const [show, state, name] = [require(process.argv[1]).session, require(process.argv[2]), process.argv[3]];
      const ok = (c, what, saw) => console.log(c ? `ok   ${what}` : `FAIL ${what}: ${saw}`);
      ok(show.agent?.agent === name, `the store binds the session to the agent ${name}`, JSON.stringify(show.agent));
      ok(show.agent?.session === state.agentSession,
        "the store binds it to the agent session its model requests named", `${show.agent?.session} vs ${state.agentSession}`);
      ok(show.title === "Real-agent suite: three files" && show.titleSource === "explicit" && show.archived === false,
        "session show: the title set, explicit, not archived", JSON.stringify([show.title, show.titleSource, show.archived]));
    ' "$dir/show.json" "$dir/state.json" "$expected_name" | tee "$dir/show.checks"
    if grep -q '^FAIL' "$dir/show.checks"; then status=1; fi
  else
    echo "FAIL sessionstore session show of the first session: $(cat "$dir/show.err" 2>/dev/null)"
    status=1
  fi
  local outbound
  outbound="$(node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).map(JSON.parse);
    console.log([...new Set(lines.filter((r) => r.outbound).map((r) => r.outbound))].join(" "));
  ' "$requests")"
  if [[ -z "$outbound" ]]; then
    echo "ok   nothing tried to reach beyond loopback (through the proxy settings the agent was given)"
  else
    echo "FAIL nothing tried to reach beyond loopback: $outbound"
    status=1
  fi
  echo "== $agent: model requests recorded: $(grep -c '"method":"POST"' "$requests" || true)"
  stop_server
  return "$status"
}

status=0
declare -A verdict
for agent in "${AGENTS[@]}"; do
  if run_agent "$agent" 2>&1 | tee "$RUN/$agent.out"; then
    verdict[$agent]=PASS
  else
    verdict[$agent]=FAIL
    status=1
  fi
  # `run_agent` runs in the pipeline's subshell: its server is its own to stop.
done

echo "== summary"
for agent in "${AGENTS[@]}"; do
  oks="$(grep -c '^ok ' "$RUN/$agent.out" || true)"
  fails="$(grep -c '^FAIL' "$RUN/$agent.out" || true)"
  echo "${verdict[$agent]} $agent: $oks ok, $fails FAIL"
  grep '^FAIL' "$RUN/$agent.out" | sed "s/^/     $agent: /" || true
done
if [[ $status -eq 0 ]]; then
  if [[ "${REAL_AGENT_KEEP:-0}" == 1 ]]; then
    echo "== PASS (run folder kept: $RUN)"
  else
    rm -rf "$RUN"
    echo "== PASS"
  fi
else
  echo "== FAIL (logs in $RUN/AGENT: first.*, second.*, model-requests.jsonl)"
fi
exit "$status"
