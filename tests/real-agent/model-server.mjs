#!/usr/bin/env node
// model-server.mjs: the model on loopback for the real-agent suite. It owns one thing:
// answering the agents' model requests with a short canned reply (Codex's in the OpenAI
// Responses API, Claude's in the Anthropic Messages API, both streamed), and writing
// down every request it gets, so the suite can read what reached the model. It never
// makes a connection of its own and never listens beyond 127.0.0.1.
//
//   node model-server.mjs --log FILE [--port-file FILE] [--max-seconds 300] [--reply TEXT]
//
// The port is chosen free by the system; it is printed as `PORT=N` (and written to
// --port-file). Every request is appended to --log as one JSON line
// {"seq","time","method","path","headers","body"}, the body parsed when it is JSON.
// `POST .../responses` gets the reply as Responses server-sent events; `POST .../messages`
// as Messages server-sent events (message_start, content_block_start, deltas,
// content_block_stop, message_delta, message_stop), or one JSON message when the request
// does not ask for a stream; `POST .../messages/count_tokens` a count; anything else a 404.
// A request for anywhere else, as a proxy (CONNECT, or an absolute URL), is recorded
// with `outbound` set and refused. It exits on SIGTERM, SIGINT or SIGHUP, when the process that started it dies, and
// after --max-seconds, whichever comes first: a suite that is killed leaves no server.

import fs from "node:fs";
import http from "node:http";
import zlib from "node:zlib";

function parseArgs(argv) {
  const opts = { log: null, portFile: null, maxSeconds: 300, reply: "I have the files." };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case "--log": opts.log = value(); break;
      case "--port-file": opts.portFile = value(); break;
      case "--max-seconds": opts.maxSeconds = Number(value()); break;
      case "--reply": opts.reply = value(); break;
      default: throw new Error(`unknown argument ${flag}`);
    }
  }
  if (!opts.log) throw new Error("--log FILE is required");
  if (!(opts.maxSeconds > 0)) throw new Error("--max-seconds must be a positive number");
  return opts;
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2));
} catch (e) {
  process.stderr.write(`model-server: ${e.message}\n`);
  process.exit(2);
}

let seq = 0;

// Codex sends plain JSON; a compressed body is decoded where Node can, so that the
// record stays readable whatever a later version does.
function decodeBody(raw, encoding) {
  switch (encoding) {
    case undefined: case "identity": return raw;
    case "gzip": return zlib.gunzipSync(raw);
    case "deflate": return zlib.inflateSync(raw);
    case "br": return zlib.brotliDecompressSync(raw);
    default:
      if (encoding === "zstd" && zlib.zstdDecompressSync) return zlib.zstdDecompressSync(raw);
      throw new Error(`cannot decode a ${encoding} body`);
  }
}

function record(req, raw) {
  let body = null;
  if (raw.length > 0) {
    let text;
    try {
      text = decodeBody(raw, req.headers["content-encoding"]).toString("utf8");
    } catch (e) {
      text = `<${e.message}>`;
    }
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  const entry = {
    seq: ++seq,
    time: new Date().toISOString(),
    method: req.method,
    path: new URL(req.url, "http://127.0.0.1").pathname,
    // A request given as an absolute URL came through this server as a proxy: it was
    // meant for somewhere else.
    ...(req.url.startsWith("/") ? {} : { outbound: req.url }),
    headers: req.headers,
    body,
  };
  // Written whole before the answer starts, so a reader never sees half a request.
  fs.appendFileSync(opts.log, JSON.stringify(entry) + "\n");
  return entry;
}

// The events Codex reads for a streamed text reply: the response created, one message
// item with its text in two deltas, the item done, the response completed (Codex
// needs its `id`).
function replyEvents(n) {
  const response = `resp_${n}`;
  const item = `msg_${n}`;
  const text = opts.reply;
  const half = Math.ceil(text.length / 2);
  const message = (status, content) =>
    ({ type: "message", id: item, role: "assistant", status, content });
  return [
    { type: "response.created", response: { id: response, status: "in_progress" } },
    { type: "response.output_item.added", output_index: 0, item: message("in_progress", []) },
    ...[text.slice(0, half), text.slice(half)].filter(Boolean).map((delta) => (
      { type: "response.output_text.delta", item_id: item, output_index: 0, content_index: 0, delta }
    )),
    {
      type: "response.output_item.done",
      output_index: 0,
      item: message("completed", [{ type: "output_text", text, annotations: [] }]),
    },
    {
      type: "response.completed",
      response: {
        id: response,
        status: "completed",
        usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 },
      },
    },
  ];
}

// The Messages API's events for a streamed text reply: the message started, one text
// block in two deltas, the block stopped, the stop reason with the usage, the end.
function messagesEvents(n, model) {
  const text = opts.reply;
  const half = Math.ceil(text.length / 2);
  const usage = { input_tokens: 1, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  return [
    {
      type: "message_start",
      message: {
        id: `msg_${n}`, type: "message", role: "assistant", model, content: [],
        stop_reason: null, stop_sequence: null, usage,
      },
    },
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    ...[text.slice(0, half), text.slice(half)].filter(Boolean).map((piece) => (
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: piece } }
    )),
    { type: "content_block_stop", index: 0 },
    { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 1 } },
    { type: "message_stop" },
  ];
}

function messagesReply(entry, res) {
  const model = entry.body?.model ?? "claude-loopback";
  if (entry.body?.stream) {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    for (const event of messagesEvents(entry.seq, model)) {
      res.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
    }
    res.end();
    return;
  }
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({
    id: `msg_${entry.seq}`, type: "message", role: "assistant", model,
    content: [{ type: "text", text: opts.reply }],
    stop_reason: "end_turn", stop_sequence: null,
    usage: { input_tokens: 1, output_tokens: 1 },
  }));
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const entry = record(req, Buffer.concat(chunks));
    if (entry.outbound) {
      res.writeHead(403, { "content-type": "text/plain" });
      res.end("the real-agent suite reaches nothing beyond loopback\n");
      return;
    }
    if (req.method === "POST" && entry.path.endsWith("/responses")) {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      for (const event of replyEvents(entry.seq)) {
        res.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
      }
      res.end();
      return;
    }
    if (req.method === "POST" && entry.path.endsWith("/messages/count_tokens")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ input_tokens: 1 }));
      return;
    }
    if (req.method === "POST" && entry.path.endsWith("/messages")) {
      messagesReply(entry, res);
      return;
    }
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message: `nothing at ${req.method} ${entry.path}` } }));
  });
});

// The agents get this server as their HTTP(S) proxy too (loopback itself bypasses it):
// a connection meant for anywhere else is recorded as `outbound` and refused, so that
// the suite can tell whether an agent tried to reach the network.
server.on("connect", (req, socket) => {
  fs.appendFileSync(opts.log, JSON.stringify({
    seq: ++seq, time: new Date().toISOString(), method: "CONNECT", path: "", outbound: req.url, headers: req.headers, body: null,
  }) + "\n");
  socket.on("error", () => {});
  socket.end("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
});

function exit(why) {
  process.stderr.write(`model-server: exiting: ${why}\n`);
  server.close();
  process.exit(0);
}

for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(signal, () => exit(signal));
// A parent that dies hands this process to another (init or a subreaper): the parent
// id changes, which is checked twice a second.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent || process.ppid === 1) exit("the process that started it is gone");
}, 500).unref();
setTimeout(() => exit(`the ${opts.maxSeconds} s time limit`), opts.maxSeconds * 1000).unref();

server.on("error", (e) => {
  process.stderr.write(`model-server: ${e.message}\n`);
  process.exit(1);
});
server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  if (opts.portFile) fs.writeFileSync(opts.portFile, `${port}\n`);
  process.stdout.write(`PORT=${port}\n`);
});
