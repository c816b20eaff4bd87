// shepherd's chat page (served by src/frontend/ui.rs). Plain JavaScript, no
// framework, nothing fetched from outside. Model text only ever goes into the
// page through textContent / text nodes, never as markup.
//
// On the cliserver the page renders from GET /updates, the observer stream
// every browser watching the session gets, and sends prompts with POST
// /request (streamed: the page reads that stream to its end, since a client
// that leaves cancels its request). On the API server it keeps the
// conversation itself and streams POST /v1/chat/completions.
// EventSource cannot send an Authorization header, so both read SSE from
// fetch()'s body.
"use strict";

const TOKEN_KEY = "shepherd-token";
const $ = (id) => document.getElementById(id);

const state = {
  mode: null, // "cli" or "api"
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  model: "",
  live: false, // cli: /updates is connected
  running: new Set(), // cli: request ids seen running on /updates
  replies: new Map(), // cli: request id -> its assistant message
  approvals: new Map(), // cli: tool call id -> its approval box
  pending: 0, // requests this tab has in flight
  history: [], // api: the conversation sent with each request
  images: [], // attached for the next message: { name, url } (a data: URL)
  abort: null, // api: the running request's AbortController
};

class Unauthorized extends Error {}

// --- talking to the server ---------------------------------------------------

async function call(path, options = {}) {
  const headers = {};
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
    cache: "no-store",
    credentials: "omit",
  });
  if (response.status === 401) {
    askToken(state.token ? "The server refused this token." : "This server needs its token.");
    throw new Unauthorized();
  }
  return response;
}

async function errorText(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || response.status + " " + response.statusText;
  } catch (_) {
    return response.status + " " + response.statusText;
  }
}

// Reads an SSE body, calling onEvent with each parsed `data:` JSON until the
// stream ends or says [DONE].
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r/g, "");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data === "[DONE]") return;
      if (!data) continue; // a keep-alive comment
      let event;
      try {
        event = JSON.parse(data);
      } catch (_) {
        continue;
      }
      onEvent(event);
    }
  }
}

// --- building the transcript (text nodes only) -------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function append(parent, node) {
  const log = $("log");
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 60;
  parent.appendChild(node);
  if (atBottom) log.scrollTop = log.scrollHeight;
  return node;
}

function newMessage(role) {
  const box = el("div", "msg " + role);
  box.appendChild(el("div", "who", role === "user" ? "you" : role));
  append($("log"), box);
  return { box, kind: null, node: null };
}

// Appends streamed text of one kind ("text" or "thinking") to a message,
// starting a new part when the kind changes.
function addPiece(message, kind, text) {
  if (message.kind !== kind) {
    if (kind === "thinking") {
      const details = el("details", "thinking");
      details.open = true;
      details.appendChild(el("summary", null, "thinking"));
      message.node = details.appendChild(el("div", "body"));
      append(message.box, details);
    } else {
      message.node = append(message.box, el("div", "text"));
    }
    message.kind = kind;
  }
  message.node.append(text);
  const log = $("log");
  if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
}

function addLine(message, className, text) {
  message.kind = null;
  return append(message.box, el("div", className, text));
}

function showToolCall(message, name, args, id) {
  const line = addLine(message, "tool-call", "⚙ " + name + " " + JSON.stringify(args));
  line.dataset.id = id || "";
}

function showToolResult(message, event) {
  const box = addLine(message, "tool-result" + (event.success ? "" : " failed"));
  box.appendChild(el("div", "summary", (event.success ? "✓ " : "✗ ") + event.name + ": " + (event.summary || "")));
  if (event.content) {
    const details = el("details");
    details.appendChild(el("summary", null, "output"));
    details.appendChild(el("pre", null, event.content));
    box.appendChild(details);
  }
  const approval = state.approvals.get(event.id);
  if (approval) settleApproval(approval, event.success ? "ran" : "did not run");
}

function showSystem(text) {
  append($("log"), el("div", "system", text));
}

function showError(text) {
  append($("log"), el("div", "error", text));
}

// --- image attachments -------------------------------------------------------
// Sent with the next message as data: URLs: on the cliserver in /request's
// `images`, on the API server as OpenAI `image_url` parts.

const IMAGE_TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"];
const MAX_IMAGE_BYTES = 20 * 1024 * 1024; // the servers' cap (src/core/image/decode.rs)

function readDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function addImages(files) {
  for (const file of files) {
    if (!IMAGE_TYPES.includes(file.type)) showError(file.name + ": not a PNG, JPEG, WebP or GIF image");
    else if (file.size > MAX_IMAGE_BYTES) showError(file.name + ": larger than 20 MiB");
    else state.images.push({ name: file.name, url: await readDataUrl(file) });
  }
  showAttachments();
}

function thumbnail(url, name) {
  const img = el("img");
  img.src = url;
  img.alt = img.title = name || "image";
  return img;
}

function showAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  state.images.forEach((image, index) => {
    const remove = el("button", null, "×");
    remove.type = "button";
    remove.title = "Remove " + image.name;
    remove.addEventListener("click", () => {
      state.images.splice(index, 1);
      showAttachments();
    });
    const thumb = el("div", "thumb");
    thumb.append(thumbnail(image.url, image.name), remove);
    box.appendChild(thumb);
  });
  box.hidden = state.images.length === 0;
}

function statsText(prompt, completion, decodeTps, prefillTps, context) {
  const parts = [prompt + " prompt tokens", completion + " generated"];
  if (decodeTps) parts.push(decodeTps.toFixed(1) + " tok/s");
  if (prefillTps) parts.push("prompt " + prefillTps.toFixed(1) + " tok/s");
  if (context) parts.push(context);
  return parts.join(" · ");
}

function showCliStats(message, stats) {
  // A round that reported nothing (an upstream without usage) says nothing.
  if (!stats.prompt_tokens && !stats.completion_tokens) return;
  const context = stats.context_size ? "context " + stats.context_used + "/" + stats.context_size : "";
  const text = statsText(stats.prompt_tokens, stats.completion_tokens, stats.decode_tps, stats.prefill_tps, context);
  addLine(message, "stats", text);
}

// --- approvals (cliserver) ---------------------------------------------------

function showApproval(message, event) {
  const box = addLine(message, "approval");
  box.appendChild(el("span", "question", "Run " + event.name + " " + JSON.stringify(event.args) + "?"));
  for (const [decision, label] of [["allow", "Allow"], ["deny", "Deny"], ["always", "Always"]]) {
    const button = el("button", "decide", label);
    button.type = "button";
    button.dataset.decision = decision;
    button.addEventListener("click", () => answerApproval(box, event.id, decision));
    box.appendChild(button);
  }
  state.approvals.set(event.tool_call_id, box);
}

async function answerApproval(box, id, decision) {
  box.querySelectorAll("button").forEach((b) => (b.disabled = true));
  try {
    const response = await call("/approve/" + encodeURIComponent(id), { method: "POST", body: { decision } });
    if (response.ok) settleApproval(box, decision);
    else settleApproval(box, "not pending any more (" + (await errorText(response)) + ")");
  } catch (error) {
    if (!(error instanceof Unauthorized)) settleApproval(box, "failed: " + error.message);
  }
}

function settleApproval(box, text) {
  box.querySelectorAll("button").forEach((b) => b.remove());
  if (!box.querySelector(".answer")) box.appendChild(el("span", "answer", text));
}

// --- the cliserver: /session, /updates, /request, /cancel ---------------------

function replyFor(requestId) {
  let message = state.replies.get(requestId);
  if (!message) {
    message = newMessage("assistant");
    state.replies.set(requestId, message);
  }
  return message;
}

function onCliEvent(event) {
  const id = event.request_id;
  switch (event.type) {
    case "connected":
      return setStatus("live");
    case "user_prompt":
      state.running.add(id);
      newMessage("user").box.appendChild(el("div", "text", event.content));
      break;
    case "delta":
    case "codeblock":
      addPiece(replyFor(id), "text", event.content);
      break;
    case "thinking":
      addPiece(replyFor(id), "thinking", event.content);
      break;
    case "tool_call":
      showToolCall(replyFor(id), event.name, event.args, event.id);
      break;
    case "tool_result":
      showToolResult(replyFor(id), event);
      break;
    case "approval_required":
      showApproval(replyFor(id), event);
      break;
    case "stats":
      showCliStats(replyFor(id), event);
      break;
    case "system":
      showSystem(event.content);
      break;
    case "error":
      if (id === undefined) showError(event.message);
      else addLine(replyFor(id), "error", event.message);
      break;
    case "response_complete":
      finishCli(id, event.finish_reason);
      break;
  }
  if (id !== undefined && event.type !== "response_complete") state.running.add(id);
  updateButtons();
}

function finishCli(id, reason) {
  const message = state.replies.get(id);
  if (message && reason !== "stop" && reason !== "tool_calls") addLine(message, "finish", "(" + reason + ")");
  if (message) message.box.classList.add("done");
  for (const [callId, box] of state.approvals) {
    if (box.closest(".msg") === (message && message.box)) {
      settleApproval(box, "closed");
      state.approvals.delete(callId);
    }
  }
  state.replies.delete(id);
  state.running.delete(id);
}

function renderSession(session) {
  $("log").replaceChildren();
  state.replies.clear();
  state.running.clear();
  for (const m of session.messages || []) {
    if (m.role === "user") {
      const box = newMessage("user").box;
      for (const i of m.images || []) box.appendChild(el("div", "image", "[image: " + i.mime + " " + i.width + "x" + i.height + "]"));
      box.appendChild(el("div", "text", m.content));
    } else if (m.role === "assistant") {
      const message = newMessage("assistant");
      if (m.thinking) addPiece(message, "thinking", m.thinking);
      if (m.content) addPiece(message, "text", m.content);
      for (const c of m.tool_calls || []) showToolCall(message, c.name, c.args, c.id);
    } else if (m.role === "tool") {
      const message = newMessage("tool");
      addPiece(message, "text", (m.tool_name ? m.tool_name + ": " : "") + m.content);
    }
  }
}

async function loadSession() {
  const response = await call("/session");
  if (!response.ok) throw new Error(await errorText(response));
  const session = await response.json();
  $("model").textContent = session.model || "";
  renderSession(session);
}

// Follows /updates for as long as the page is open, reconnecting (and
// reloading the session) when the stream ends.
async function follow() {
  for (;;) {
    try {
      const response = await call("/updates");
      if (!response.ok) throw new Error(await errorText(response));
      state.live = true;
      await readEvents(response, onCliEvent);
    } catch (error) {
      if (error instanceof Unauthorized) return;
    }
    state.live = false;
    setStatus("reconnecting…");
    await new Promise((resolve) => setTimeout(resolve, 2000));
    try {
      await loadSession();
    } catch (error) {
      if (error instanceof Unauthorized) return;
    }
  }
}

async function sendCli(prompt, images) {
  const body = { prompt, stream: true };
  if (images.length) body.images = images;
  const response = await call("/request", { method: "POST", body });
  if (!response.ok) return showError(await errorText(response));
  // Read to the end: leaving early would cancel the request. /updates shows
  // it; only when that stream is down are this stream's events shown.
  await readEvents(response, (event) => state.live || onCliEvent(event));
}

// --- the API server: /v1/chat/completions -------------------------------------

async function sendApi(prompt, images) {
  // With images, OpenAI content parts: the images, then the text.
  const parts = images.map((url) => ({ type: "image_url", image_url: { url } }));
  if (prompt) parts.push({ type: "text", text: prompt });
  state.history.push({ role: "user", content: images.length ? parts : prompt });
  const box = newMessage("user").box;
  if (images.length) box.appendChild(el("div", "images")).append(...images.map((url) => thumbnail(url)));
  box.appendChild(el("div", "text", prompt));
  const message = newMessage("assistant");
  const reply = { text: "", calls: [], finish: null, usage: null, timings: null };
  state.abort = new AbortController();
  try {
    const body = { messages: state.history, stream: true, stream_options: { include_usage: true } };
    if (state.model) body.model = state.model;
    const response = await call("/v1/chat/completions", { method: "POST", body, signal: state.abort.signal });
    if (!response.ok) return addLine(message, "error", await errorText(response));
    await readEvents(response, (chunk) => onApiChunk(message, reply, chunk));
    finishApi(message, reply);
  } catch (error) {
    if (error.name === "AbortError") {
      addLine(message, "finish", "(cancelled)");
      // What was shown stays part of the conversation, as the cliserver keeps it.
      if (reply.text) state.history.push({ role: "assistant", content: reply.text });
    } else if (!(error instanceof Unauthorized)) addLine(message, "error", error.message);
  } finally {
    state.abort = null;
  }
}

function onApiChunk(message, reply, chunk) {
  if (chunk.error) return addLine(message, "error", chunk.error.message || "error");
  if (chunk.usage) reply.usage = chunk.usage;
  if (chunk.timings) reply.timings = chunk.timings;
  const choice = (chunk.choices || [])[0];
  if (!choice) return;
  const delta = choice.delta || {};
  if (delta.reasoning_content) addPiece(message, "thinking", delta.reasoning_content);
  if (delta.content) {
    reply.text += delta.content;
    addPiece(message, "text", delta.content);
  }
  for (const part of delta.tool_calls || []) {
    const slot = (reply.calls[part.index || 0] ||= { id: "", name: "", args: "" });
    if (part.id) slot.id = part.id;
    if (part.function && part.function.name) slot.name += part.function.name;
    if (part.function && part.function.arguments) slot.args += part.function.arguments;
  }
  if (choice.finish_reason) reply.finish = choice.finish_reason;
}

function finishApi(message, reply) {
  for (const c of reply.calls) {
    let args = c.args;
    try {
      args = JSON.parse(c.args || "{}");
    } catch (_) {}
    showToolCall(message, c.name, args, c.id);
  }
  if (reply.finish && reply.finish !== "stop" && reply.finish !== "tool_calls") {
    addLine(message, "finish", "(" + reply.finish + ")");
  }
  if (reply.usage) {
    const t = reply.timings || {};
    const text = statsText(reply.usage.prompt_tokens, reply.usage.completion_tokens, t.predicted_per_second, t.prompt_per_second, "");
    addLine(message, "stats", text);
  }
  // Only text goes back into the conversation: this page runs no tools, and
  // an unanswered tool call would be refused by the next request.
  if (reply.text) state.history.push({ role: "assistant", content: reply.text });
}

// --- the controls ------------------------------------------------------------

function setStatus(text) {
  $("status").textContent = text;
}

function updateButtons() {
  const ready = state.mode !== null && $("token-form").hidden;
  $("prompt").disabled = !ready;
  $("send").disabled = !ready;
  $("attach").disabled = !ready;
  const busy = state.pending > 0 || state.running.size > 0;
  $("cancel").disabled = !ready || !busy;
}

function askToken(message) {
  $("token-form").hidden = false;
  setStatus(message);
  updateButtons();
  $("token").focus();
}

async function submitPrompt(event) {
  event.preventDefault();
  const prompt = $("prompt").value;
  const images = state.images.map((image) => image.url);
  if (!prompt.trim() && !images.length) return;
  $("prompt").value = "";
  state.images = [];
  showAttachments();
  state.pending++;
  updateButtons();
  try {
    if (state.mode === "cli") await sendCli(prompt, images);
    else await sendApi(prompt, images);
  } catch (error) {
    if (!(error instanceof Unauthorized)) showError(error.message);
  } finally {
    state.pending--;
    updateButtons();
  }
}

async function cancel() {
  if (state.mode === "api") {
    if (state.abort) state.abort.abort();
    return;
  }
  try {
    const response = await call("/cancel", { method: "POST", body: {} });
    if (!response.ok) showError(await errorText(response));
  } catch (error) {
    if (!(error instanceof Unauthorized)) showError(error.message);
  }
}

async function start() {
  const health = await fetch("/health", { cache: "no-store" })
    .then((r) => r.json())
    .catch(() => ({}));
  state.mode = health.server_type === "cliserver" ? "cli" : "api";
  $("mode").textContent = state.mode === "cli" ? "cliserver" : "API server";
  try {
    if (state.mode === "cli") {
      await loadSession();
      setStatus("connecting…");
      follow();
    } else {
      const response = await call("/v1/models");
      if (!response.ok) throw new Error(await errorText(response));
      const models = await response.json();
      state.model = (models.data && models.data[0] && models.data[0].id) || "";
      $("model").textContent = state.model;
      setStatus("ready");
    }
    $("token-form").hidden = true;
  } catch (error) {
    if (!(error instanceof Unauthorized)) setStatus("cannot reach the server: " + error.message);
  }
  updateButtons();
}

function init() {
  // Another site may not show this page in a frame (the server also says
  // frame-ancestors 'none'); every call goes to this page's own origin.
  if (window.top !== window.self) {
    document.body.replaceChildren(el("p", null, "shepherd's page does not run inside another page."));
    return;
  }
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = $("token").value.trim();
    $("token").value = "";
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $("token-form").hidden = true;
    setStatus("connecting…");
    start();
  });
  $("prompt-form").addEventListener("submit", submitPrompt);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("prompt-form").requestSubmit();
    }
  });
  $("cancel").addEventListener("click", cancel);
  $("attach").addEventListener("click", () => $("image-file").click());
  $("image-file").addEventListener("change", (event) => {
    addImages([...event.target.files]).catch((error) => showError(error.message));
    event.target.value = "";
  });
  start();
}

init();
