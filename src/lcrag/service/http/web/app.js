// The web page's script (a file, not inline: the page's CSP allows only the server's own script).
const $ = (id) => document.getElementById(id);
const headers = (json) => {
  const h = json ? {"Content-Type": "application/json"} : {};
  if ($("api-key").value) h["Authorization"] = "Bearer " + $("api-key").value;
  return h;
};
async function api(path, options = {}) {
  const response = await fetch(path, {...options, headers: {...headers(typeof options.body === "string"), ...(options.headers || {})}});
  const body = response.headers.get("content-type")?.includes("json") ? await response.json() : null;
  if (!response.ok) throw new Error(body?.error?.message || response.statusText);
  return body;
}
// Listing, creating and choosing collections run one after another: files picked right after Create go to the
// collection just made, and the page's first listing can never land after a later one and undo its choice.
let settled = Promise.resolve();
function inTurn(step) { const run = settled.then(step); settled = run.catch(() => {}); return run; }
function say(text, isError) { $("status").textContent = text; $("status").className = isError ? "error" : "meta"; }

async function refresh(select) {
  try {
    const list = (await api("/v1/collections")).data;
    const current = select || $("collection").value;
    $("collection").replaceChildren(...list.map(c => new Option(c.name)));
    if (current) $("collection").value = current;
    showConversation();
    showStatus(list.find(c => c.name === $("collection").value));
  } catch (e) { say(e.message, true); }
}
function showStatus(c) {
  if (!c) return say("No collection yet: create one.");
  const s = c.status;
  const files = c.files.map(f => f.name).join(", ") || "no files";
  say(`${c.name}: ${s.state}${s.state === "indexing" ? ` (${s.done}/${s.files} files)` : ""} — ${files}` +
      (s.error ? ` — ${s.error}` : "") + (s.skipped?.length ? ` — skipped: ${s.skipped.join("; ")}` : ""), s.state === "error");
}
async function poll(name) {
  for (;;) {
    const c = await api(`/v1/collections/${encodeURIComponent(name)}`);
    showStatus(c);
    if (c.status.state !== "indexing") return;
    await new Promise(r => setTimeout(r, 700));
  }
}
async function upload(files) {
  const name = await inTurn(() => $("collection").value);
  if (!name) return say("Create a collection first.", true);
  for (const file of files) {
    const form = new FormData();
    form.append("file", file);
    say(`uploading ${file.name}…`);
    try { await api(`/v1/collections/${encodeURIComponent(name)}/files`, {method: "POST", body: form}); }
    catch (e) { say(`${file.name}: ${e.message}`, true); return; }
  }
  await poll(name);
}

// Sources open without giving the opened document any hold on this page (noopener: no window.opener, so nothing
// it runs can read the API key field). With a key, the file is fetched with it and shown from a blob of a type that
// cannot run script here: a PDF in the browser's viewer at its page, text as plain text; anything else (an uploaded
// HTML page, a DOCX) is saved, never rendered on this origin.
const INLINE = {pdf: "application/pdf", txt: "text/plain", md: "text/plain", jsonl: "text/plain"};
function openSource(collection, source) {
  const file = source.file.split("/").pop();
  const url = `/v1/collections/${encodeURIComponent(collection)}/files/${encodeURIComponent(file)}`;
  const page = source.pages?.length ? `#page=${source.page_numbering === "physical" ? source.pages[0] : ""}` : "";
  if (!$("api-key").value) return window.open(url + page, "_blank", "noopener");
  const type = INLINE[file.split(".").pop().toLowerCase()];
  fetch(url, {headers: headers(false)}).then(r => r.blob()).then(b => {
    const blob = URL.createObjectURL(new Blob([b], {type: type || "application/octet-stream"}));
    if (type) return window.open(blob + (type === "application/pdf" ? page : ""), "_blank", "noopener");
    const link = Object.assign(document.createElement("a"), {href: blob, download: file});
    link.click();
  });
}
function place(s) {
  const where = s.pages?.length ? `p. ${s.pages.join("–")}` : s.lines ? `l. ${s.lines[0]}–${s.lines[1]}` : "";
  const section = s.section?.length ? ` (§ ${s.section[s.section.length - 1]})` : "";
  return `${s.file.split("/").pop()} ${where}${section}`;
}
// How a follow-up was asked: rewritten by the reader into a question that stands alone, or with the conversation
// written out before it (and its turns joined into the search).
function followUp(c) {
  if (!c) return "";
  return c.method === "condensed" ? ` · follow-up, asked as “${c.question}”` : " · follow-up, asked with the conversation so far";
}
function renderMeta(box, collection, answer) {
  const cost = answer.cost?.total != null ? ` · $${answer.cost.total.toFixed(6)}${answer.cost.priced_as ? " as " + answer.cost.priced_as : ""}` : "";
  const seconds = Object.values(answer.timings || {}).reduce((a, b) => a + b, 0);
  box.querySelector(".summary").textContent = `route: ${answer.route} · ${answer.prompt_tokens} prompt + ` +
    `${answer.completion_tokens} completion tokens${cost} · ` +
    (answer.calls.length && answer.calls.every(c => c.from_cache) ? "from the answer cache" : `${seconds.toFixed(1)} s`) +
    followUp(answer.conversation);
  const list = box.querySelector("ul");
  list.innerHTML = "";
  for (const s of answer.sources) {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = "#"; link.textContent = place(s) + (s.how === "located" ? " (located)" : "");
    link.addEventListener("click", (e) => { e.preventDefault(); openSource(collection, s); });
    item.append(link, document.createTextNode(` — “${s.snippet}”`));
    list.append(item);
  }
}
function answerBox(title) {
  const box = document.createElement("article");
  box.className = "answer-box";
  box.innerHTML = `<h3></h3><p class="stage meta" role="status"></p><p class="answer"></p>` +
    `<button type="button" class="secondary stop">Stop</button><p class="meta summary"></p><h4>Sources</h4><ul class="sources"></ul>`;
  box.querySelector("h3").textContent = title;
  return box;
}
// The native stream (/v1/ask, stream: true): stage events as they happen, the reader's tokens as it writes them
// (a step that a later one may replace, Self-Route's RAG step, is shown as a draft), then the whole answer.
// Resolves to the answer, or to null when there is none (refused, failed, stopped).
async function askInto(box, strategy, collection, question, history) {
  const answer = box.querySelector(".answer"), stage = box.querySelector(".stage"), stop = box.querySelector(".stop");
  const meta = box.querySelector(".summary");
  const fail = (message) => { stage.textContent = ""; meta.textContent = message; meta.classList.add("error"); };
  const abort = new AbortController();
  stop.onclick = () => abort.abort();
  stage.textContent = "waiting for the reader…";
  let text = "", response, retrieved = false;  // whether this step retrieved passages (else it reads everything)
  try {
    response = await fetch("/v1/ask", {method: "POST", headers: headers(true), signal: abort.signal,
      body: JSON.stringify({collection, question, strategy, history, stream: true})});
  } catch (e) { stop.hidden = true; fail(e.name === "AbortError" ? "stopped" : e.message); return null; }
  if (!response.ok) { stop.hidden = true; const e = await response.json(); fail(e.error.message); return null; }
  let result = null;
  const reader = response.body.getReader(), decoder = new TextDecoder();
  const on = {
    started: () => { stage.textContent = "started"; },
    conversation: (d) => { stage.textContent = d.method === "condensed" ? `asked as: “${d.question}”` : "asked with the conversation so far"; },
    retrieved: (d) => { retrieved = true; stage.textContent = `reading ${d.chunks.length} passages` +
                         (d.tokens != null ? ` (${d.tokens} tokens)` : "") + ": " + d.chunks.map(place).join("; "); },
    call: (d) => { text = ""; answer.textContent = ""; answer.classList.toggle("draft", d.provisional);
                   if (!retrieved) stage.textContent = "reading the whole document…"; },
    token: (d) => { if (!text && !retrieved) stage.textContent = "the whole document read: writing…";
                    text += d.text; answer.textContent = text; },
    routed: (d) => { retrieved = false; stage.textContent = d.fallback ? `the retrieved passages were not enough` +
                     (d.decline_probability != null ? ` (P(decline) = ${d.decline_probability.toFixed(2)})` : "") +
                     `: answering with ${d.route === "lc" ? "the whole document (LC)" : d.route}…` : `answer kept (${d.route})`; },
    answer: (d) => { answer.classList.remove("draft"); answer.textContent = d.text; stage.textContent = "";
                     renderMeta(box, collection, d); result = d; },
    error: (d) => fail(d.error.message),
  };
  let buffer = "";
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
        const name = /^event: (.*)$/m.exec(block)?.[1], data = /^data: (.*)$/m.exec(block)?.[1];
        if (name && data && on[name]) on[name](JSON.parse(data));
      }
    }
  } catch (e) { if (e.name !== "AbortError") fail(e.message); else fail("stopped: the server stops generating"); }
  stop.hidden = true;
  return result;
}

// One conversation per collection while the page is open: each answered turn's question and answer go with the next
// question as its history, so a follow-up ("which algorithm does it use?") is asked about what came before.
const conversations = new Map();  // collection -> {turns: [{question, answer}], boxes: [elements shown]}
function conversation(name) {
  if (!conversations.has(name)) conversations.set(name, {turns: [], boxes: []});
  return conversations.get(name);
}
const history = (c) => c.turns.flatMap(t => [{role: "user", content: t.question}, {role: "assistant", content: t.answer}]);
function showConversation() {
  const c = conversation($("collection").value);
  $("result").replaceChildren(...c.boxes);
  $("new-conversation").disabled = !c.boxes.length;
}
function shown(c, element) { c.boxes.push(element); $("result").append(element); $("new-conversation").disabled = false; }
async function askTurn() {
  const collection = $("collection").value, question = $("question").value, strategy = $("strategy").value;
  const c = conversation(collection), box = answerBox(question);
  box.querySelector("h3").title = `strategy: ${strategy}`;
  shown(c, box);
  const answer = await askInto(box, strategy, collection, question, history(c));
  if (answer) c.turns.push({question, answer: answer.text});
}
async function compareTurn() {
  const collection = $("collection").value, question = $("question").value, c = conversation(collection);
  const grid = document.createElement("div"); grid.className = "compare";
  const lc = answerBox("LC (whole document)"), rag = answerBox("RAG (retrieved chunks)");
  grid.append(lc, rag); shown(c, grid);
  await askInto(lc, "lc", collection, question, history(c)); await askInto(rag, "rag", collection, question, history(c));
}
$("create").addEventListener("click", () => inTurn(async () => {
  try { const c = await api("/v1/collections", {method: "POST", body: JSON.stringify({name: $("new-name").value})}); await refresh(c.name); }
  catch (e) { say(e.message, true); }
}));
$("collection").addEventListener("change", () => { inTurn(() => refresh()); showConversation(); });
$("files").addEventListener("change", (e) => upload(e.target.files));
$("drop").addEventListener("dragover", (e) => { e.preventDefault(); $("drop").classList.add("over"); });
$("drop").addEventListener("dragleave", () => $("drop").classList.remove("over"));
$("drop").addEventListener("drop", (e) => { e.preventDefault(); $("drop").classList.remove("over"); upload(e.dataTransfer.files); });
$("ask").addEventListener("click", askTurn);
$("compare").addEventListener("click", compareTurn);
$("new-conversation").addEventListener("click", () => { conversations.delete($("collection").value); showConversation(); $("question").focus(); });
$("question").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("ask").click(); });
inTurn(() => refresh());
