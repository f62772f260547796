#!/usr/bin/env node
// client.mjs: the editor's side of the real-agent suite. It owns one thing: driving an
// ACP agent command (here `sessionstore proxy -- codex-acp` or `-- claude-agent-acp`)
// over its standard input and output as an editor would, and judging, from what it got
// back and from what the loopback model server recorded, whether each attachment's path
// reached the model and reads back the original bytes, and whether archive, titles and
// a fork at a cursor work through the proxy. It never talks to the network and never
// touches the store's database: it sees only what a client and the model see.
//
//   node client.mjs first  --agent codex|claude --run DIR --root DIR --requests FILE [--timeout-s 120] -- COMMAND [ARGS...]
//   node client.mjs second --agent codex|claude --run DIR --root DIR --old-root DIR --requests FILE [--timeout-s 120] -- COMMAND [ARGS...]
//
// `first` writes the three files to send (a PNG, a text file, a binary file) under
// DIR/files, opens a session (announcing session cursors) and sends one prompt with them
// interleaved with text, keeping the cursor the proxy sends after the agent's first
// message; `second` loads that session in a new process and prompts again, then sets a
// title, forks at that cursor and loads the fork, archives and unarchives. Both then
// close the command's input, as an editor that quits does, and check that it and
// everything it started have exited. Each check prints `ok   <name>` or `FAIL <name>: <why>`; the
// exit status is 1 when one failed. DIR/<phase>.acp.jsonl holds every message both
// ways, DIR/<phase>.stderr the command's standard error, DIR/state.json what `second`
// needs of `first`.

import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const CONTEXT_KEY = "daemon/attachmentContext";

// ---------- arguments ----------

function parseArgs(argv) {
  const split = argv.indexOf("--");
  if (split < 0 || split === argv.length - 1) throw new Error("missing `-- COMMAND [ARGS...]`");
  const [phase, ...flags] = argv.slice(0, split);
  const opts = { phase, command: argv.slice(split + 1), timeoutS: 120 };
  for (let i = 0; i < flags.length; i++) {
    const flag = flags[i];
    const value = () => {
      if (i + 1 >= flags.length) throw new Error(`${flag} needs a value`);
      return flags[++i];
    };
    switch (flag) {
      case "--agent": opts.agent = value(); break;
      case "--run": opts.run = path.resolve(value()); break;
      case "--root": opts.root = path.resolve(value()); break;
      case "--old-root": opts.oldRoot = path.resolve(value()); break;
      case "--requests": opts.requests = path.resolve(value()); break;
      case "--timeout-s": opts.timeoutS = Number(value()); break;
      default: throw new Error(`unknown argument ${flag}`);
    }
  }
  if (!["first", "second"].includes(phase)) throw new Error("the phase is `first` or `second`");
  if (!["codex", "claude"].includes(opts.agent)) throw new Error("--agent is `codex` or `claude`");
  for (const need of ["run", "root", "requests"]) {
    if (!opts[need]) throw new Error(`--${need} is required`);
  }
  if (phase === "second" && !opts.oldRoot) throw new Error("`second` needs --old-root");
  return opts;
}

// ---------- verdicts ----------

let failures = 0;

function check(name, ok, why = "") {
  if (ok) {
    console.log(`ok   ${name}`);
  } else {
    failures += 1;
    console.log(`FAIL ${name}${why ? `: ${why}` : ""}`);
  }
  return ok;
}

function note(text) {
  console.log(`     (${text})`);
}

// ---------- the files sent ----------

function crc32(bytes) {
  let crc = ~0;
  for (const byte of bytes) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = (crc >>> 1) ^ (0xedb88320 & -(crc & 1));
  }
  return ~crc >>> 0;
}

// A real 8x8 PNG, made here so that nothing is fetched: four coloured bands.
function png() {
  const size = 8;
  const bands = [[200, 30, 30], [30, 160, 60], [40, 70, 200], [250, 250, 250]];
  const rows = [];
  for (let y = 0; y < size; y++) {
    rows.push(0); // no filter
    for (let x = 0; x < size; x++) rows.push(...bands[Math.floor(y / 2)]);
  }
  const chunk = (type, data) => {
    const head = Buffer.alloc(4);
    head.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
    const tail = Buffer.alloc(4);
    tail.writeUInt32BE(crc32(body));
    return Buffer.concat([head, body, tail]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", zlib.deflateSync(Buffer.from(rows))),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

// The three files, written once by `first` and read back by both phases to compare.
function files(run, write) {
  const dir = path.join(run, "files");
  const made = {
    image: { label: "the image", name: "picture.png", mime: "image/png", bytes: png() },
    text: {
      label: "the text file",
      name: "meeting notes.txt",
      mime: "text/plain",
      bytes: Buffer.from("Meeting notes\n- café budget: 42\n- marker: TEXT-FILE-7f3a\n", "utf8"),
    },
    binary: {
      label: "the binary file",
      name: "data.bin",
      mime: "application/octet-stream",
      // Every byte value, so that no encoding on the way can pass for the original.
      bytes: Buffer.concat([Buffer.from([0x00, 0xff, 0xfe, 0x80]), Buffer.from([...Array(256).keys()])]),
    },
  };
  if (write) {
    fs.mkdirSync(dir, { recursive: true });
    for (const f of Object.values(made)) fs.writeFileSync(path.join(dir, f.name), f.bytes);
  }
  for (const f of Object.values(made)) {
    f.bytes = fs.readFileSync(path.join(dir, f.name));
  }
  return made;
}

// ---------- the agent command over stdio ----------

class Connection {
  constructor(command, logFile, stderrFile) {
    this.log = fs.openSync(logFile, "w");
    this.stderr = fs.openSync(stderrFile, "w");
    // A process group of its own, so that a timeout can end it whatever it started.
    this.child = spawn(command[0], command.slice(1), {
      stdio: ["pipe", "pipe", this.stderr],
      detached: true,
    });
    this.nextId = 1;
    this.pending = new Map();
    this.updates = [];
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => resolve({ code, signal }));
      this.child.on("error", (e) => resolve({ error: e.message }));
    });
    this.child.on("error", (e) => {
      for (const { reject } of this.pending.values()) reject(e);
      this.pending.clear();
    });
    this.child.stdin.on("error", () => {}); // a command that died is reported by `exited`
    let buffer = "";
    this.child.stdout.on("data", (data) => {
      buffer += data.toString("utf8");
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).trim();
        buffer = buffer.slice(newline + 1);
        if (line) this.received(line);
      }
    });
    this.child.stdout.on("end", () => {
      for (const { reject } of this.pending.values()) reject(new Error("the command closed its output"));
      this.pending.clear();
    });
  }

  write(message) {
    fs.writeSync(this.log, JSON.stringify({ to: "agent", message }) + "\n");
    this.child.stdin.write(JSON.stringify(message) + "\n");
  }

  received(line) {
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      fs.writeSync(this.log, JSON.stringify({ from: "agent", notJson: line }) + "\n");
      this.notJson = (this.notJson ?? 0) + 1;
      return;
    }
    fs.writeSync(this.log, JSON.stringify({ from: "agent", message }) + "\n");
    if (message.method && message.id !== undefined) {
      this.answer(message);
    } else if (message.method) {
      if (message.method === "session/update") this.updates.push(message.params);
    } else if (this.pending.has(message.id)) {
      const { resolve } = this.pending.get(message.id);
      this.pending.delete(message.id);
      resolve(message);
    }
  }

  // What an editor answers the agent: permission granted once (Codex in full access
  // asks for none, and the canned model asks for no tool); no files or terminals offered.
  answer(request) {
    if (request.method === "session/request_permission") {
      const option = request.params.options.find((o) => o.kind === "allow_once") ?? request.params.options[0];
      this.write({ jsonrpc: "2.0", id: request.id, result: { outcome: { outcome: "selected", optionId: option.optionId } } });
      return;
    }
    this.write({ jsonrpc: "2.0", id: request.id, error: { code: -32601, message: `${request.method} is not offered` } });
  }

  // The response message, result or error.
  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.write({ jsonrpc: "2.0", id, method, params });
    });
  }

  // The editor goes: its end of the pipe closes; the command is given `seconds` to exit.
  async close(seconds) {
    this.child.stdin.end();
    const timer = new Promise((resolve) => setTimeout(() => resolve(null), seconds * 1000).unref());
    return Promise.race([this.exited, timer]);
  }
}

// ---------- processes ----------

// Every process descended from `pid` now, from /proc where there is one, else `ps`.
function descendants(pid) {
  const parents = new Map();
  if (fs.existsSync("/proc/self/stat")) {
    for (const entry of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
        // The command name is in parentheses and may hold spaces: read after the last ')'.
        const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        parents.set(Number(entry), Number(fields[1]));
      } catch {
        // gone meanwhile
      }
    }
  } else {
    for (const line of execFileSync("ps", ["-A", "-o", "pid=", "-o", "ppid="], { encoding: "utf8" }).split("\n")) {
      const [child, parent] = line.trim().split(/\s+/).map(Number);
      if (child) parents.set(child, parent);
    }
  }
  const found = [];
  let frontier = [pid];
  while (frontier.length) {
    const next = [];
    for (const [child, parent] of parents) {
      if (frontier.includes(parent) && !found.includes(child)) {
        found.push(child);
        next.push(child);
      }
    }
    frontier = next;
  }
  return found;
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === "EPERM";
  }
}

async function allGone(pids, seconds) {
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    if (!pids.some(alive)) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return !pids.some(alive);
}

function kill(pids, groups) {
  for (const pid of groups) {
    try { process.kill(-pid, "SIGKILL"); } catch { /* gone */ }
  }
  for (const pid of pids) {
    try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
  }
}

// ---------- what the model got ----------

// The model API each agent speaks: Codex the OpenAI Responses API, Claude the Anthropic
// Messages API.
const API = {
  codex: {
    isModelRequest: (r) => r.path.endsWith("/responses"),
    // Every content part of a Responses request's input, as `{message, role, type, text?,
    // image?}` (`message`: the index of the input item it is in).
    parts(request) {
      const out = [];
      for (const [message, item] of (request.body?.input ?? []).entries()) {
        if (item.type !== "message" || !Array.isArray(item.content)) continue;
        const role = item.role;
        for (const part of item.content) {
          if (part.type === "input_text" || part.type === "output_text") {
            out.push({ message, role, type: "text", text: part.text });
          } else if (part.type === "input_image") {
            const m = /^data:([^;]+);base64,(.*)$/s.exec(part.image_url ?? "");
            out.push({ message, role, type: "image", mime: m?.[1], image: m?.[2] });
          } else {
            out.push({ message, role, type: part.type });
          }
        }
      }
      return out;
    },
    // Codex names its own session (thread) in a header of every model request.
    agentSession: (request) => request.headers["session-id"] ?? null,
    dropsMeta: "as Codex drops _meta; the paths came as text blocks",
  },
  claude: {
    isModelRequest: (r) => r.path.endsWith("/messages"),
    // Every content block of a Messages request's messages (a tool result's blocks
    // too), as `{message, role, type, text?, image?}`.
    parts(request) {
      const out = [];
      const block = (message, role, b) => {
        if (typeof b === "string") out.push({ message, role, type: "text", text: b });
        else if (b?.type === "text") out.push({ message, role, type: "text", text: b.text });
        else if (b?.type === "image") {
          out.push({ message, role, type: "image", mime: b.source?.media_type, image: b.source?.type === "base64" ? b.source.data : undefined });
        } else if (b?.type === "document" && b.source?.type === "text") {
          out.push({ message, role, type: "text", text: b.source.data });
        } else if (b?.type === "tool_result") {
          for (const inner of Array.isArray(b.content) ? b.content : [b.content ?? ""]) block(message, role, inner);
        } else out.push({ message, role, type: b?.type });
      };
      for (const [index, m] of (request.body?.messages ?? []).entries()) {
        for (const b of Array.isArray(m.content) ? m.content : [m.content]) block(index, m.role, b);
      }
      return out;
    },
    // Claude Code names its session in a header, and in the request's metadata.
    agentSession(request) {
      const header = request.headers["x-claude-code-session-id"];
      if (header) return header;
      const m = /session_([0-9a-f-]{36})/.exec(request.body?.metadata?.user_id ?? "");
      return m?.[1] ?? null;
    },
    dropsMeta: "the paths came as text blocks",
  },
};

let api = null;

function allRecorded(file) {
  if (!fs.existsSync(file)) return [];
  return fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

function modelRequests(file) {
  return allRecorded(file).filter((r) => r.method === "POST" && !r.outbound && api.isModelRequest(r));
}

function parts(request) {
  return api.parts(request);
}

// The conversation's request among those a turn made: the last one whose last user
// message carries `marker`. An agent asks its model other things on the side: Claude
// Code names the session from the prompt (one user message, no tools) and may ask for
// a suggestion of what to type next (its own user message last).
function finalRequest(requests, marker) {
  const lastUserMessage = (r) => {
    const all = parts(r);
    let at = all.length;
    while (at > 0 && all[at - 1].role !== "user") at -= 1;
    let start = at;
    while (start > 0 && all[start - 1].role === "user" && all[start - 1].message === all[at - 1]?.message) start -= 1;
    return all.slice(start, at);
  };
  const conversation = requests.filter((r) => (r.body?.tools ?? []).length > 0
    && lastUserMessage(r).some((p) => p.text?.includes(marker)));
  const carrying = requests.filter((r) => parts(r).some((p) => p.text?.includes(marker)));
  return conversation.at(-1) ?? carrying.at(-1) ?? requests.at(-1);
}

// The JSON line of every attachment context in `text`: the store's context string has
// exactly one, with the name, URI, MIME type, path and host.
function contextsIn(text) {
  const found = [];
  for (const line of String(text).split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      const value = JSON.parse(line);
      if (typeof value.path === "string" && typeof value.uri === "string") found.push(value);
    } catch {
      // not a context line
    }
  }
  return found;
}

function under(root, file) {
  return path.isAbsolute(file) && file.startsWith(root + path.sep);
}

function readOrNull(file) {
  try {
    return fs.readFileSync(file);
  } catch {
    return null;
  }
}

// Checks that each file's path reached the model in `contexts` (the context lines the
// model got), under `root`, and that reading it returns the file's bytes. A file's
// context is the one whose path reads back its bytes, else the one with its MIME type.
function checkPaths(where, contexts, root, sent) {
  const paths = JSON.stringify([...new Set(contexts.map((c) => c.path))]);
  for (const file of Object.values(sent)) {
    const exact = contexts.filter((c) => under(root, c.path) && readOrNull(c.path)?.equals(file.bytes));
    const context = exact[0] ?? contexts.find((c) => c.mimeType === file.mime);
    check(`${where}: the path of ${file.label} is under ${root}`,
      context && under(root, context.path), `paths seen: ${paths}`);
    check(`${where}: reading that path returns the original bytes of ${file.label}`,
      exact.length > 0,
      context
        ? `${context.path} ${readOrNull(context.path) ? "reads other bytes" : "cannot be read"} (sent: ${file.bytes.length} bytes)`
        : "no path to read");
  }
}

function imageParts(request, image) {
  const wanted = image.bytes.toString("base64");
  return parts(request).filter((p) => p.type === "image" && p.image === wanted);
}

// ---------- the phases ----------

// No files or terminals offered; session cursors announced (schema 1.20's shape).
const CLIENT_CAPABILITIES = {
  fs: { readTextFile: false, writeTextFile: false },
  terminal: false,
  session: { cursors: {} },
};

// The session updates of `sessionId` of one kind.
function updatesOf(conn, sessionId, kind, from = 0) {
  return conn.updates.slice(from).filter((u) => u.sessionId === sessionId && u.update?.sessionUpdate === kind)
    .map((u) => u.update);
}

// The cursor the proxy sent anchored after the agent's first message of the turn whose
// updates begin at `from`: the client's point to fork at.
function cursorAfterFirstAgentMessage(conn, sessionId, from) {
  const message = updatesOf(conn, sessionId, "agent_message_chunk", from).find((u) => u.messageId)?.messageId;
  const cursors = updatesOf(conn, sessionId, "cursor_update", from);
  const cursor = cursors.find((c) => c.anchor?.type === "agent_message" && c.anchor.messageId === message
    && c.anchor.position === "after");
  check("a cursor_update anchored after the agent's first message, with fork among its capabilities",
    cursor && typeof cursor.cursorId === "string" && cursor.capabilities?.fork != null,
    `agent message id: ${message ?? "none on its chunks"}; cursor updates: ${JSON.stringify(cursors).slice(0, 400)}`);
  return cursor ? { cursorId: cursor.cursorId, messageId: message } : null;
}

async function first(opts, conn, sent) {
  const init = await conn.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: CLIENT_CAPABILITIES,
    clientInfo: { name: "sessionstore-real-agent-suite", version: "1" },
  });
  check("initialize is answered, protocol version 1", init.result?.protocolVersion === 1, JSON.stringify(init.error ?? init.result));
  check("the proxy offers session/load", init.result?.agentCapabilities?.loadSession === true);
  const project = path.join(opts.run, "project");
  fs.mkdirSync(project, { recursive: true });
  const created = await conn.request("session/new", { cwd: project, mcpServers: [] });
  const sessionId = created.result?.sessionId;
  if (!check("session/new gives a session id", typeof sessionId === "string", JSON.stringify(created.error))) return;

  // Text, an image, text, a text file, text, a binary file, text: interleaved. The files
  // come with URIs that are not file:// (a paste, an unsaved buffer), so the proxy
  // stores them; a file:// one would stay the client's own and be passed on as it is.
  const prompt = [
    { type: "text", text: "Caption one: a picture (run 1)." },
    { type: "image", mimeType: "image/png", data: sent.image.bytes.toString("base64") },
    { type: "text", text: "Caption two: my notes." },
    {
      type: "resource",
      resource: { uri: "memory:///meeting%20notes.txt", mimeType: "text/plain", text: sent.text.bytes.toString("utf8") },
    },
    { type: "text", text: "Caption three: the raw data." },
    {
      type: "resource",
      resource: { uri: "memory:///data.bin", mimeType: "application/octet-stream", blob: sent.binary.bytes.toString("base64") },
    },
    { type: "text", text: "Caption four: what is in these files?" },
  ];
  const before = modelRequests(opts.requests).length;
  const updatesBefore = conn.updates.length;
  const answer = await conn.request("session/prompt", { sessionId, prompt });
  check("the prompt ends with stopReason end_turn", answer.result?.stopReason === "end_turn", JSON.stringify(answer.error ?? answer.result));
  check("the agent streamed its reply to the client",
    conn.updates.some((u) => u.sessionId === sessionId && u.update?.sessionUpdate === "agent_message_chunk"));
  const cursor = cursorAfterFirstAgentMessage(conn, sessionId, updatesBefore);
  const requests = modelRequests(opts.requests).slice(before);
  if (!check("the model server got the prompt's request", requests.length > 0)) return { sessionId, cursor };
  const final = finalRequest(requests, "Caption one");
  const all = parts(final);
  const contexts = all.filter((p) => p.type === "text").flatMap((p) => contextsIn(p.text));
  checkPaths("final model request", contexts, opts.root, sent);
  check("final model request: the image still reaches the model as an image, bytes intact",
    imageParts(final, sent.image).length === 1);

  // The order the client gave, as the model got it: each caption, then the attachment's
  // path context, then the attachment itself (the binary file's content does not reach
  // either model at all; its path context does). Claude's adapter moves an embedded
  // text file's contents after the whole prompt, as a `<context ref=…>` block.
  const steps = [
    ["caption one", (p) => p.text?.includes("Caption one")],
    ["the image's context", (p) => contextsIn(p.text ?? "").some((c) => readOrNull(c.path)?.equals(sent.image.bytes))],
    ["the image", (p) => p.type === "image"],
    ["caption two", (p) => p.text?.includes("Caption two")],
    ["the text file's context", (p) => contextsIn(p.text ?? "").some((c) => readOrNull(c.path)?.equals(sent.text.bytes))],
    ["the text file's contents", (p) => p.text?.includes("marker: TEXT-FILE-7f3a")],
    ["caption three", (p) => p.text?.includes("Caption three")],
    ["the binary file's context", (p) => contextsIn(p.text ?? "").some((c) => readOrNull(c.path)?.equals(sent.binary.bytes))],
    ["caption four", (p) => p.text?.includes("Caption four")],
  ];
  if (opts.agent === "claude") {
    const contents = steps.findIndex(([name]) => name === "the text file's contents");
    steps.push(...steps.splice(contents, 1));
  }
  let at = 0;
  for (const p of all) if (at < steps.length && steps[at][1](p)) at += 1;
  check("final model request: text and attachments arrive interleaved, in the order sent",
    at === steps.length, at < steps.length ? `missing or out of order from: ${steps[at][0]}` : "");
  note(`the request's "${CONTEXT_KEY}" _meta: ${JSON.stringify(final.body).includes(CONTEXT_KEY) ? "present" : `absent, ${api.dropsMeta}`}`);
  return { sessionId, agentSession: api.agentSession(final), cursor };
}

async function second(opts, conn, sent, state) {
  await reload(opts, conn, sent, state);
  await titleForkArchive(opts, conn, state);
}

// Every session `session/list` gives with `params`, page after page (at most 20).
async function listed(conn, params) {
  const sessions = [];
  let answer = await conn.request("session/list", params);
  for (let pages = 1; ; pages++) {
    sessions.push(...(answer.result?.sessions ?? []));
    const next = answer.result?.nextCursor;
    if (!next || answer.error || pages >= 20) break;
    answer = await conn.request("session/list", { ...params, cursor: next });
  }
  return { error: answer.error, sessions };
}

// The entries a replay of `sessionId` gave (from update `from` on): messages and tool
// calls, a message once however many chunks it came in.
function replayedEntries(conn, sessionId, from) {
  const entries = [];
  for (const u of conn.updates.slice(from)) {
    if (u.sessionId !== sessionId) continue;
    const update = u.update ?? {};
    const kind = update.sessionUpdate;
    if (!["user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call"].includes(kind)) continue;
    const last = entries.at(-1);
    const same = last && last.kind === kind && kind !== "tool_call"
      && (update.messageId == null || last.messageId === update.messageId);
    if (same) {
      last.text += update.content?.text ?? "";
    } else {
      entries.push({ kind, messageId: update.messageId ?? update.toolCallId ?? null, text: update.content?.text ?? "" });
    }
  }
  return entries;
}

// Through the proxy, on the session of the first phase: a title set and listed; a fork
// at the cursor after the agent's first message, loaded; archive and unarchive, listed.
async function titleForkArchive(opts, conn, state) {
  const sessionId = state.sessionId;
  const project = path.join(opts.run, "project");

  const title = "Real-agent suite: three files";
  const set = await conn.request("session/set_title", { sessionId, title: `  ${title}  ` });
  check("session/set_title answers the title it stored, trimmed", set.result?.title === title,
    JSON.stringify(set.error ?? set.result));
  const titled = await listed(conn, {});
  const row = titled.sessions.find((s) => s.sessionId === sessionId);
  check("session/list then shows that title", row?.title === title, JSON.stringify(titled.error ?? row ?? "not listed"));

  if (check("the first phase kept a cursor to fork at", typeof state.cursor?.cursorId === "string",
    "no cursor_update came after the agent's first message")) {
    const forked = await conn.request("session/fork",
      { sessionId, cwd: project, mcpServers: [], cursorId: state.cursor.cursorId });
    const fork = forked.result?.sessionId;
    if (check("session/fork with that cursorId gives a new session", typeof fork === "string" && fork !== sessionId,
      JSON.stringify(forked.error ?? forked.result))) {
      const from = conn.updates.length;
      const loaded = await conn.request("session/load", { sessionId: fork, cwd: project, mcpServers: [] });
      check("session/load of the fork is answered", loaded.result && !loaded.error, JSON.stringify(loaded.error));
      const entries = replayedEntries(conn, fork, from);
      const seen = JSON.stringify(entries.map((e) => `${e.kind}:${e.messageId}:${e.text.slice(0, 30)}`));
      check("the fork's replay begins with the first prompt",
        entries[0]?.kind === "user_message_chunk" && entries[0].text.includes("Caption one"), seen);
      const last = entries.at(-1);
      check("the fork's replay ends at the cursor's entry, the agent's first message",
        last?.kind === "agent_message_chunk" && last.messageId === state.cursor.messageId,
        `cursor's message: ${state.cursor.messageId}; replay: ${seen}`);
      check("the fork's replay holds nothing of the second prompt",
        !entries.some((e) => e.text.includes("Second prompt")), seen);
    }
  }

  const archived = await conn.request("session/archive", { sessionId });
  check("session/archive is answered", archived.result && !archived.error, JSON.stringify(archived.error));
  const plain = await listed(conn, {});
  check("session/list leaves the archived session out by default",
    !plain.error && !plain.sessions.some((s) => s.sessionId === sessionId), JSON.stringify(plain.error ?? "listed"));
  const only = await listed(conn, { archived: "only" });
  const archivedRow = only.sessions.find((s) => s.sessionId === sessionId);
  check('session/list with archived "only" lists it, archived',
    archivedRow?.archived === true, JSON.stringify(only.error ?? archivedRow ?? "not listed"));
  const unarchived = await conn.request("session/unarchive", { sessionId });
  check("session/unarchive is answered", unarchived.result && !unarchived.error, JSON.stringify(unarchived.error));
  const back = await listed(conn, {});
  const backRow = back.sessions.find((s) => s.sessionId === sessionId);
  check("session/list then lists it by default again, not archived, title kept",
    backRow?.archived === false && backRow.title === title, JSON.stringify(back.error ?? backRow ?? "not listed"));
}

async function reload(opts, conn, sent, state) {
  const init = await conn.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: CLIENT_CAPABILITIES,
    clientInfo: { name: "sessionstore-real-agent-suite", version: "1" },
  });
  check("initialize is answered after the restart", init.result?.protocolVersion === 1, JSON.stringify(init.error ?? init.result));
  const before = modelRequests(opts.requests).length;
  const project = path.join(opts.run, "project");
  const loaded = await conn.request("session/load", { sessionId: state.sessionId, cwd: project, mcpServers: [] });
  check("session/load of the first session is answered", loaded.result && !loaded.error, JSON.stringify(loaded.error));

  // The replay the client got before the answer: the store's history, each attachment
  // with the path of a read made now.
  const replayed = conn.updates.filter((u) => u.sessionId === state.sessionId);
  const userBlocks = replayed.filter((u) => u.update?.sessionUpdate === "user_message_chunk").map((u) => u.update.content);
  const replayContexts = userBlocks.flatMap((b) => contextsIn(b?._meta?.[CONTEXT_KEY] ?? ""));
  check("the replay gives back the first prompt's text",
    userBlocks.some((b) => b?.type === "text" && b.text.includes("Caption one")));
  checkPaths("the replay", replayContexts, opts.root, sent);
  check("the replay gives back the agent's answer",
    replayed.some((u) => u.update?.sessionUpdate === "agent_message_chunk"));
  check("the load itself asks the model nothing", modelRequests(opts.requests).length === before);

  const answer = await conn.request("session/prompt", {
    sessionId: state.sessionId,
    prompt: [{ type: "text", text: "Second prompt (run 2): where are those three files now?" }],
  });
  check("the second prompt ends with stopReason end_turn", answer.result?.stopReason === "end_turn", JSON.stringify(answer.error ?? answer.result));
  const requests = modelRequests(opts.requests).slice(before);
  if (!check("the model server got the second prompt's request", requests.length > 0)) return;
  const final = finalRequest(requests, "Second prompt");
  const all = parts(final);
  check(`the agent resumed its own session (same ${opts.agent} session as before the restart)`,
    state.agentSession && api.agentSession(final) === state.agentSession,
    `before: ${state.agentSession}, now: ${api.agentSession(final)}`);
  check("the agent kept its history: the first prompt is in the new request",
    all.some((p) => p.text?.includes("Caption one")) && all.some((p) => p.text?.includes("Second prompt")));
  const contexts = all.filter((p) => p.type === "text").flatMap((p) => contextsIn(p.text));
  checkPaths("final model request after the restart", contexts, opts.root, sent);
  check("final model request after the restart: the image still reaches the model as an image",
    imageParts(final, sent.image).length >= 1);
  const stale = [...new Set(contexts.filter((c) => under(opts.oldRoot, c.path)).map((c) => c.path))];
  note(stale.length
    ? `${stale.length} path(s) under the old root are still in the request: the agent's own history of the first prompt, which the proxy cannot rewrite; they no longer exist: ${stale.every((p) => !fs.existsSync(p))}`
    : "no path under the old root is in the request");
}

// ---------- main ----------

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`client: ${e.message}\n`);
    process.exit(2);
  }
  api = API[opts.agent];
  const sent = files(opts.run, opts.phase === "first");
  const statePath = path.join(opts.run, "state.json");
  let state = null;
  if (opts.phase === "second") {
    try {
      state = JSON.parse(fs.readFileSync(statePath, "utf8"));
    } catch (e) {
      check("the first phase left its session to load", false, e.message);
      process.exit(1);
    }
  }
  const conn = new Connection(opts.command,
    path.join(opts.run, `${opts.phase}.acp.jsonl`), path.join(opts.run, `${opts.phase}.stderr`));
  const proxyPid = conn.child.pid;
  let seen = [];
  const timeout = setTimeout(() => {
    check(`the ${opts.phase} phase ends within ${opts.timeoutS} s`, false, "timed out; killing what it started");
    kill([...seen, ...descendants(proxyPid)], [proxyPid]);
    process.exit(1);
  }, opts.timeoutS * 1000);

  let result;
  try {
    result = opts.phase === "first" ? await first(opts, conn, sent) : await second(opts, conn, sent, state);
  } catch (e) {
    check(`the ${opts.phase} phase runs to its end`, false, e.message);
  }
  // What the proxy started (the agent), looked up while the proxy still runs.
  seen = descendants(proxyPid);
  check("the proxy runs the agent as its child", seen.length > 0);
  const exit = await conn.close(15);
  check("the proxy exits, with status 0, when its client goes",
    exit !== null && exit.code === 0, exit === null ? "still running 15 s after its input closed" : JSON.stringify(exit));
  check("the agent exits with it", await allGone(seen, 5), `still running: ${seen.filter(alive).join(" ")}`);
  check("the proxy wrote nothing but JSON-RPC on its output", !conn.notJson, `${conn.notJson} other lines`);
  if (opts.phase === "first" && result) fs.writeFileSync(statePath, JSON.stringify(result, null, 2) + "\n");
  clearTimeout(timeout);
  kill([...seen, ...descendants(proxyPid)], exit === null ? [proxyPid] : []);
  process.exit(failures ? 1 : 0);
}

main();
