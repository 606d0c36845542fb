// The chat page: one WebSocket (authenticated by the session cookie), streamed answers, and
// for each answer its TTFT, tokens/s and TBT p99 against the tenant's contract for the tier.
"use strict";
(() => {
  const config = JSON.parse(document.getElementById("chat-config").textContent);
  const TIER = config.tier_names; // the server's tier vocabulary (apps/core/tiers.py)
  const $ = (id) => document.getElementById(id);
  const messages = $("messages"), input = $("chat-input"), send = $("chat-send");
  const stop = $("chat-stop"), status = $("chat-status"), tierSelect = $("chat-tier");
  let socket = null, turn = null, closedForGood = false;

  const ms = (s) => (s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`);

  function bubble(role, text) {
    const item = document.createElement("li");
    item.className = `message ${role}`;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Laser";
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
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

  function showMetrics(done) {
    const terms = config.terms[turn.tier] || {};
    const line = document.createElement("p");
    line.className = "metrics";
    const served = document.createElement("span");
    served.className = `tier ${done.tier}`;
    served.textContent = `served ${done.tier}`;
    line.append(served);
    const n = done.usage.completion_tokens;
    const decodeS = turn.last && turn.first ? (turn.last - turn.first) / 1000 : 0;
    const tps = n > 1 && decodeS > 0 ? (n - 1) / decodeS : null;
    if (done.ttft_s !== null && done.ttft_s !== undefined) {
      if (turn.tier === TIER.HOT) {
        line.append(metric("TTFT", ms(done.ttft_s), `contract p99 ≤ ${ms(terms.ttft_p99_s)}`,
                           done.ttft_s <= terms.ttft_p99_s));
      } else if (turn.tier === TIER.WARM) {
        line.append(metric("TTFT", ms(done.ttft_s), `contract mean ≤ ${ms(terms.warm_mean_ttft_s)}`,
                           done.ttft_s <= terms.warm_mean_ttft_s));
      } else {
        line.append(metric("TTFT", ms(done.ttft_s)));
      }
    }
    if (tps !== null) {
      const target = turn.tier === TIER.WARM ? terms.warm_rate_tps : null;
      line.append(metric("tokens/s", tps.toFixed(1), target ? `contract ≥ ${target}` : "",
                         target ? tps >= target : undefined));
    }
    const p99 = done.tbt && done.tbt.p99_s;
    if (p99 !== null && p99 !== undefined) {
      const target = turn.tier === TIER.HOT ? terms.tbt_p99_s : null;
      line.append(metric("TBT p99", ms(p99), target ? `contract ≤ ${ms(target)}` : "",
                         target ? p99 <= target : undefined));
    }
    line.append(metric("tokens", `${done.usage.prompt_tokens} in / ${n} out`));
    turn.item.append(line);
    if (done.tier !== turn.tier && !turn.demoted) {
      note(turn.item, "demoted", `Demoted: asked for ${turn.tier}, served at ${done.tier}.`, true);
    }
  }

  function finish() {
    turn = null;
    send.disabled = !socket || socket.readyState !== WebSocket.OPEN;
    stop.disabled = true;
    input.focus();
  }

  function onMessage(event) {
    const msg = JSON.parse(event.data);
    if (msg.type === "ready") {
      status.textContent = `connected · tenant ${msg.tenant}`;
      send.disabled = turn !== null;
      return;
    }
    if (msg.type === "reset") { messages.replaceChildren(); return; }
    if (!turn) {
      if (msg.type === "error") note(bubble("assistant", ""), "error", msg.error.message, true);
      return;
    }
    if (msg.type === "delta") {
      const now = performance.now();
      if (msg.text && turn.first === null) turn.first = now;
      if (msg.text) turn.last = now;
      turn.text.textContent += msg.text;
    } else if (msg.type === "tier_changed") {
      turn.demoted = true;
      note(turn.item, "demoted", `Demoted from ${msg.from} to ${msg.to}` +
           (msg.reason ? ` (${msg.reason})` : "") + ".", true);
    } else if (msg.type === "done") {
      turn.item.classList.remove("streaming");
      showMetrics(msg);
      finish();
    } else if (msg.type === "error") {
      turn.item.classList.remove("streaming");
      note(turn.item, "error", msg.error.message, true);
      finish();
    } else if (msg.type === "stopped") {
      turn.item.classList.remove("streaming");
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

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || turn || socket.readyState !== WebSocket.OPEN) return;
    bubble("user", text);
    const item = bubble("assistant", "");
    item.classList.add("streaming");
    turn = {item, text: item.querySelector(".text"), tier: tierSelect.value, first: null,
            last: null, demoted: false};
    socket.send(JSON.stringify({type: "chat", content: text, tier: turn.tier,
                                model: $("chat-model").value,
                                max_tokens: Number($("chat-max-tokens").value) || 256}));
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
    input.focus();
  });
  connect();
})();
