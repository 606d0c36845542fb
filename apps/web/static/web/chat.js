// The chat page: one WebSocket (authenticated by the session cookie), streamed answers rendered
// as sanitised markdown, conversations kept on the server (list, rename, delete, reopen), the
// request as curl / openai SDK, and for each answer its TTFT, tokens/s and TBT p99 against the
// tenant's contract for the tier.
"use strict";
(() => {
  const config = JSON.parse(document.getElementById("chat-config").textContent);
  const TIER = config.tier_names; // the server's tier vocabulary (apps/core/tiers.py)
  const $ = (id) => document.getElementById(id);
  const messages = $("messages"), input = $("chat-input"), send = $("chat-send");
  const stop = $("chat-stop"), status = $("chat-status"), tierSelect = $("chat-tier");
  const list = $("conversation-list"), system = $("chat-system");
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  let socket = null, turn = null, closedForGood = false;
  let current = new URLSearchParams(location.search).get("c");  // stored conversation id
  let convo = [];  // this conversation's messages as the API sees them (no system message)

  const ms = (s) => (s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`);

  // marked and DOMPurify load after the page (they are only needed for the first answer), so
  // they never hold up the page; an answer shown before they arrive is rendered when they do.
  const renderer = Promise.all(document.currentScript.dataset.markdown.split(" ").map(
    (src) => new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.onload = resolve;
      script.onerror = reject;
      document.head.append(script);
    })));

  // An answer's markdown as HTML that cannot run anything: DOMPurify drops scripts, event
  // handlers and javascript: URLs from what marked produces.
  function renderMarkdown(node, text) {
    if (!window.marked || !window.DOMPurify) {
      node.textContent = text;  // plain until the renderer is here
      renderer.then(() => renderMarkdown(node, text));
      return;
    }
    node.innerHTML = DOMPurify.sanitize(marked.parse(text, {gfm: true, breaks: true}));
    node.classList.add("markdown");
    node.querySelectorAll("pre").forEach((pre) => {
      const copy = document.createElement("button");
      copy.type = "button"; copy.className = "copy"; copy.textContent = "Copy";
      copy.addEventListener("click", () => navigator.clipboard.writeText(pre.textContent)
        .then(() => { copy.textContent = "Copied"; }, () => {}));
      const wrap = document.createElement("div");
      wrap.className = "snippet";
      pre.replaceWith(wrap);
      wrap.append(pre, copy);
    });
  }

  function bubble(role, text) {
    const item = document.createElement("li");
    item.className = `message ${role}`;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Laser";
    const body = document.createElement("div");
    body.className = "text";
    if (role === "assistant" && text) renderMarkdown(body, text); else body.textContent = text;
    item.append(who, body);
    messages.append(item);
    item.scrollIntoView({block: "end"});
    return item;
  }

  function note(item, className, text, alert) {
    const p = document.createElement("p");
    p.className = className;
    if (alert) p.setAttribute("role", "alert");
    p.textContent = text;
    item.append(p);
    return p;
  }

  function metric(label, value, target, ok) {
    const span = document.createElement("span");
    span.className = "metric" + (ok === undefined ? "" : ok ? " ok" : " bad");
    const verdict = ok === undefined ? "" : ok ? ", kept" : ", missed";  // not colour alone
    span.textContent = `${label} ${value}` + (target ? ` (${target}${verdict})` : "");
    return span;
  }

  // The SLO line of one answer: ``done`` is the socket's message (or its stored copy), ``tier``
  // the tier asked, ``tps`` the decode rate seen by this page (null for a stored answer).
  function showMetrics(item, done, tier, tps) {
    const terms = config.terms[tier] || {};
    const line = document.createElement("p");
    line.className = "metrics";
    const served = document.createElement("span");
    served.className = `tier ${done.tier}`;
    served.textContent = `served ${done.tier}`;
    line.append(served);
    if (done.ttft_s !== null && done.ttft_s !== undefined) {
      if (tier === TIER.HOT) {
        line.append(metric("TTFT", ms(done.ttft_s), `contract p99 ≤ ${ms(terms.ttft_p99_s)}`,
                           done.ttft_s <= terms.ttft_p99_s));
      } else if (tier === TIER.WARM) {
        line.append(metric("TTFT", ms(done.ttft_s), `contract mean ≤ ${ms(terms.warm_mean_ttft_s)}`,
                           done.ttft_s <= terms.warm_mean_ttft_s));
      } else {
        line.append(metric("TTFT", ms(done.ttft_s)));
      }
    }
    if (tps !== null) {
      const target = tier === TIER.WARM ? terms.warm_rate_tps : null;
      line.append(metric("tokens/s", tps.toFixed(1), target ? `contract ≥ ${target}` : "",
                         target ? tps >= target : undefined));
    }
    const p99 = done.tbt && done.tbt.p99_s;
    if (p99 !== null && p99 !== undefined) {
      const target = tier === TIER.HOT ? terms.tbt_p99_s : null;
      line.append(metric("TBT p99", ms(p99), target ? `contract ≤ ${ms(target)}` : "",
                         target ? p99 <= target : undefined));
    }
    line.append(metric("tokens", `${done.usage.prompt_tokens} in / ${done.usage.completion_tokens} out`));
    item.append(line);
  }

  function turnMetrics(done) {
    const n = done.usage.completion_tokens;
    const decodeS = turn.last && turn.first ? (turn.last - turn.first) / 1000 : 0;
    showMetrics(turn.item, done, turn.tier, n > 1 && decodeS > 0 ? (n - 1) / decodeS : null);
    if (done.tier !== turn.tier && !turn.demoted) {
      note(turn.item, "demoted", `Demoted: asked for ${turn.tier}, served at ${done.tier}.`, true);
    }
  }

  // Settings, checked here as the server checks them: a bad value is named, never replaced.
  function number(id, low, high, {integer = false, openLow = false} = {}) {
    const field = $(id), error = $(`${id}-error`), raw = field.value.trim();
    const value = Number(raw);
    const ok = raw !== "" && Number.isFinite(value) && (!integer || Number.isInteger(value)) &&
      (openLow ? value > low : value >= low) && value <= high;
    error.textContent = ok ? "" : (integer ? `A whole number from ${low} to ${high}.`
                                           : `A number ${openLow ? "above" : "from"} ${low} to ${high}.`);
    field.setAttribute("aria-invalid", ok ? "false" : "true");
    return ok ? value : null;
  }

  function settings() {
    const s = {
      max_tokens: number("chat-max-tokens", 1, config.max_tokens, {integer: true}),
      temperature: number("chat-temperature", 0, 2),
      top_p: number("chat-top-p", 0, 1, {openLow: true}),
    };
    if (Object.values(s).includes(null)) return null;
    // JSON mode: the engine constrains every token of the answer to valid JSON
    return $("chat-json").checked ? {...s, json_mode: true} : s;
  }

  // A JSON-mode answer is shown as a JSON code block (pretty-printed when it parses).
  function asMarkdown(text, json) {
    if (!json) return text;
    let pretty = text;
    try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch (err) { /* as sent */ }
    return "```json\n" + pretty + "\n```";
  }

  function finish() {
    turn = null;
    send.disabled = !socket || socket.readyState !== WebSocket.OPEN;
    stop.disabled = true;
    input.focus();
  }

  function endStream(raw) {
    turn.item.classList.remove("streaming");
    if (raw) renderMarkdown(turn.text, asMarkdown(raw, turn.json));
  }

  function listItem(c) {
    let item = list.querySelector(`li[data-conversation="${c.id}"]`);
    if (!item) {
      item = document.createElement("li");
      item.dataset.conversation = c.id;
      const link = document.createElement("a");
      link.href = `?c=${c.id}`;
      const actions = document.createElement("span");
      actions.className = "conv-actions";
      for (const name of ["rename", "delete"]) {
        const b = document.createElement("button");
        b.type = "button"; b.className = `link ${name}`;
        b.textContent = name[0].toUpperCase() + name.slice(1);
        actions.append(b);
      }
      item.append(link, actions);
    }
    item.querySelector("a").textContent = c.title;
    item.querySelectorAll("button").forEach((b) => b.setAttribute("aria-label", `${b.textContent} ${c.title}`));
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    list.prepend(item);
    list.querySelectorAll("a").forEach((a) => a.removeAttribute("aria-current"));
    item.querySelector("a").setAttribute("aria-current", "page");
  }

  function opened(c) {
    messages.replaceChildren();
    current = c.id;
    convo = c.messages.map((m) => ({role: m.role, content: m.content}));
    system.value = c.system || "";
    const s = c.settings || {};
    if (s.max_tokens) $("chat-max-tokens").value = s.max_tokens;
    if (s.temperature !== undefined) $("chat-temperature").value = s.temperature;
    if (s.top_p !== undefined) $("chat-top-p").value = s.top_p;
    if (s.service_tier && config.tiers.includes(s.service_tier)) tierSelect.value = s.service_tier;
    $("chat-json").checked = Boolean(s.response_format);
    for (const m of c.messages) {
      const json = m.role === "assistant" && m.meta && m.meta.json;
      const item = bubble(m.role, json ? asMarkdown(m.content, true) : m.content);
      if (m.meta) showMetrics(item, m.meta, m.meta.tier_asked || m.meta.tier, null);
    }
    listItem({id: c.id, title: c.title});
    showCode();
  }

  function onMessage(event) {
    const msg = JSON.parse(event.data);
    if (msg.type === "ready") {
      status.textContent = `connected · tenant ${msg.tenant}`;
      send.disabled = turn !== null;
      if (current) socket.send(JSON.stringify({type: "open", conversation: current}));
      return;
    }
    if (msg.type === "reset") { messages.replaceChildren(); convo = []; showCode(); return; }
    if (msg.type === "opened") { opened(msg.conversation); return; }
    if (msg.type === "saved") {
      current = msg.conversation.id;
      history.replaceState(null, "", `?c=${current}`);
      listItem(msg.conversation);
      return;
    }
    if (!turn) {
      if (msg.type === "error") {
        if (msg.error.code === "conversation_not_found") { current = null; history.replaceState(null, "", location.pathname); }
        note(bubble("assistant", ""), "error", msg.error.message, true);
      }
      return;
    }
    if (msg.type === "delta") {
      const now = performance.now();
      if (msg.text && turn.first === null) turn.first = now;
      if (msg.text) turn.last = now;
      turn.raw += msg.text;
      turn.text.textContent = turn.raw;  // plain while streaming; markdown once complete
    } else if (msg.type === "tier_changed") {
      turn.demoted = true;
      note(turn.item, "demoted", `Demoted from ${msg.from} to ${msg.to}` +
           (msg.reason ? ` (${msg.reason})` : "") + ".", true);
    } else if (msg.type === "done") {
      endStream(turn.raw);
      convo.push({role: "user", content: turn.asked}, {role: "assistant", content: turn.raw});
      turnMetrics(msg);
      finish();
      showCode();
    } else if (msg.type === "error") {
      endStream(turn.raw);
      note(turn.item, "error", msg.error.message, true);
      finish();
    } else if (msg.type === "stopped") {
      endStream(turn.raw);
      note(turn.item, "muted", "Stopped.");
      finish();
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + config.socket);
    status.textContent = "connecting…";
    socket.addEventListener("message", onMessage);
    socket.addEventListener("close", (event) => {
      send.disabled = true;
      if (turn) { note(turn.item, "error", "Connection lost.", true); finish(); }
      if (event.code === 4401 || event.code === 4403) {
        closedForGood = true;
        status.textContent = event.code === 4401 ? "signed out: reload and sign in"
                                                 : "no tenant chosen: reload";
      } else if (!closedForGood) {
        status.textContent = "reconnecting…";
        setTimeout(connect, 2000);
      }
    });
  }

  // "View code": the next request of this conversation as an API client would send it.
  function requestBody() {
    const s = settings() || {};
    const next = input.value.trim() || "Hello!";
    const msgs = [...(system.value.trim() ? [{role: "system", content: system.value.trim()}] : []),
                  ...convo, {role: "user", content: next}];
    return {model: $("chat-model").value, messages: msgs, service_tier: tierSelect.value,
            max_tokens: s.max_tokens, temperature: s.temperature, top_p: s.top_p,
            response_format: s.json_mode ? {type: "json_object"} : undefined};
  }

  function showCode() {
    if ($("code-panel").hidden) return;
    const body = requestBody();
    const json = JSON.stringify(body, null, 2);
    $("code-curl").textContent = `curl ${config.base_url}/chat/completions \\\n` +
      `  -H "Authorization: Bearer $LASER_API_KEY" \\\n  -H "Content-Type: application/json" \\\n` +
      `  -d @- <<'EOF'\n${json}\nEOF`;
    const py = (v) => JSON.stringify(v).replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False")
      .replace(/\bnull\b/g, "None");
    const args = Object.entries(body).filter(([, v]) => v !== undefined && v !== null)
      .map(([k, v]) => k === "messages"
        ? `    messages=[\n${v.map((m) => `        ${py(m)},`).join("\n")}\n    ],`
        : `    ${k}=${py(v)},`).join("\n");
    $("code-python").textContent = `import os\nfrom openai import OpenAI\n\n` +
      `client = OpenAI(base_url="${config.base_url}", api_key=os.environ["LASER_API_KEY"])\n` +
      `reply = client.chat.completions.create(\n${args}\n)\nprint(reply.choices[0].message.content)`;
  }

  $("chat-code").addEventListener("click", () => {
    const panel = $("code-panel");
    panel.hidden = !panel.hidden;
    $("chat-code").setAttribute("aria-expanded", String(!panel.hidden));
    showCode();
  });
  for (const id of ["chat-system", "chat-tier", "chat-max-tokens", "chat-temperature",
                    "chat-top-p", "chat-input", "chat-json"]) {
    $(id).addEventListener("input", showCode);
  }

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || turn || socket.readyState !== WebSocket.OPEN) return;
    const s = settings();
    if (!s) return;  // the field says what is wrong
    bubble("user", text);
    const item = bubble("assistant", "");
    item.classList.add("streaming");
    turn = {item, text: item.querySelector(".text"), tier: tierSelect.value, first: null,
            last: null, demoted: false, raw: "", asked: text, json: Boolean(s.json_mode)};
    socket.send(JSON.stringify({type: "chat", content: text, tier: turn.tier,
                                model: $("chat-model").value, system: system.value, ...s}));
    input.value = "";
    send.disabled = true;
    stop.disabled = false;
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  stop.addEventListener("click", () => socket.send(JSON.stringify({type: "stop"})));
  $("chat-new").addEventListener("click", () => {
    socket.send(JSON.stringify({type: "reset"}));
    if (turn) finish();
    current = null;
    history.replaceState(null, "", location.pathname);
    list.querySelectorAll("a").forEach((a) => a.removeAttribute("aria-current"));
    input.focus();
  });

  async function post(url, data) {
    const response = await fetch(url, {method: "POST", headers: {"X-CSRFToken": csrf, Accept: "application/json"},
                                       body: new URLSearchParams(data)});
    if (!response.ok) throw new Error(String(response.status));
    return response.json();
  }

  list.addEventListener("click", async (event) => {
    const button = event.target.closest("button");
    const item = event.target.closest("li[data-conversation]");
    if (!button || !item) return;
    const id = item.dataset.conversation, link = item.querySelector("a");
    if (button.classList.contains("rename")) {
      const title = window.prompt("Rename the conversation", link.textContent);
      if (!title || !title.trim()) return;
      const renamed = await post(`/chat/${id}/rename`, {title});
      link.textContent = renamed.title;
    } else if (button.classList.contains("delete")) {
      if (!window.confirm(`Delete “${link.textContent}”? This cannot be undone.`)) return;
      await post(`/chat/${id}/delete`, {});
      item.remove();
      if (id === current) $("chat-new").click();
    }
  });
  connect();
})();
