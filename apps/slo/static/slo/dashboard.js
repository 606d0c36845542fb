/* Laser SLO dashboard: polls data.json every 2 s and redraws cards, charts and tables. */
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  if (!root) return;
  const URL_ = root.dataset.url;
  const POLL_MS = 2000;
  // the tier names come from the server's vocabulary (apps/core/tiers.py), urgent first
  const TIER = JSON.parse(document.getElementById("laser-tiers").textContent);
  const TIERS = Object.values(TIER);
  const COLORS = { [TIER.HOT]: "#e8553d", [TIER.WARM]: "#e0a21b", [TIER.COLD]: "#2f80d8", target: "#172033" };
  const charts = {};
  let batches = [];

  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const pct = (v) => (v === null || v === undefined ? "–" : (v * 100).toFixed(v >= 0.999 || v === 0 ? 0 : 1) + " %");
  const ms = (v) => (v === null || v === undefined ? "–" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : Math.round(v) + " ms");
  const num = (v, d) => (v === null || v === undefined ? "–" : Number(v).toFixed(d || 0));

  function row(dl, label, value, bad) {
    dl.appendChild(el("dt", {}, label));
    dl.appendChild(el("dd", bad ? { class: "bad" } : {}, value));
  }

  function card(c) {
    const node = el("article", { class: "card " + c.tier, "data-tier": c.tier });
    const head = el("header");
    head.appendChild(el("span", { class: "tier" }, c.tier + " · v" + c.version));
    // "pending": requests in the hour but nothing judged yet (no job due, no window closed)
    const label = { met: "met", missed: "missed", idle: "no traffic",
                    pending: c.tier === TIER.COLD ? "no job due yet" : "pending" }[c.status];
    head.appendChild(el("span", { class: "pill " + c.status, "data-role": "status" }, label));
    node.appendChild(head);
    const big = el("p", { class: "big", "data-role": "attainment" }, pct(c.attainment));
    big.appendChild(el("small", {}, "  target " + pct(c.attainment_target)));
    node.appendChild(big);
    const bar = el("div", { class: "bar" });
    const fill = el("span");
    fill.style.width = ((c.attainment || 0) * 100) + "%";
    if (c.status === "missed") fill.style.background = "#d8343f";
    const mark = el("i");
    mark.style.left = (c.attainment_target * 100) + "%";
    bar.append(fill, mark);
    node.appendChild(bar);
    const dl = el("dl");
    row(dl, "requests", num(c.requests));
    if (c.tier === TIER.HOT) {
      row(dl, "P99 TTFT / target", ms(c.ttft_p99_ms) + " / " + ms(c.ttft_target_ms), c.ttft_p99_ms > c.ttft_target_ms);
      row(dl, "P99 TBT / target", ms(c.tbt_p99_ms) + " / " + ms(c.tbt_target_ms), c.tbt_p99_ms > c.tbt_target_ms);
      row(dl, "interruptions", num(c.interruptions) + (c.interruption_rate !== null ? " (" + pct(c.interruption_rate) + ")" : ""),
          c.missed.includes("interruptions"));
      row(dl, "demotions", num(c.demotions), c.missed.includes("demotions"));
    } else if (c.tier === TIER.WARM) {
      row(dl, "delivered / floor tok/s", num(c.delivered_tps, 1) + " / " + num(c.floor_tps, 1), c.missed.includes("delivered tokens/s"));
      row(dl, "mean TTFT / target", ms(c.ttft_mean_ms) + " / " + ms(c.ttft_target_ms), c.missed.includes("mean TTFT"));
      row(dl, "P99 TBT", ms(c.tbt_p99_ms));
      row(dl, "demotions in", num(c.demotions));
    } else {
      row(dl, "jobs on time / due", num(c.jobs_on_time) + " / " + num(c.jobs_due), c.missed.includes("jobs on time"));
      row(dl, "deadline", (c.deadline_s / 3600).toFixed(1) + " h");
    }
    row(dl, "excess admitted", num(c.excess));
    row(dl, "429s", num(c.rejected_429));
    row(dl, "tokens/s", num(c.tokens_per_s, 1));
    node.appendChild(dl);
    return node;
  }

  function chart(id, type, datasets, options) {
    const ctx = document.getElementById(id);
    charts[id] = new Chart(ctx, {
      type: type,
      data: { labels: [], datasets: datasets },
      options: Object.assign({
        animation: false, responsive: true, maintainAspectRatio: false, spanGaps: true,
        interaction: { mode: "index", intersect: false },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
        scales: { x: { ticks: { maxTicksLimit: 8 } }, y: { beginAtZero: true } },
      }, options || {}),
    });
  }

  function line(label, color, dashed) {
    return { label: label, borderColor: color, backgroundColor: color + "33", borderWidth: 2,
             pointRadius: 0, tension: 0.25, borderDash: dashed ? [6, 4] : [], data: [] };
  }

  function initCharts() {
    chart("chart-ttft", "line", [line(TIER.HOT, COLORS[TIER.HOT]), line(TIER.WARM, COLORS[TIER.WARM]), line(TIER.HOT + " target", COLORS.target, true)]);
    chart("chart-attainment", "line", TIERS.map((t) => line(t, COLORS[t])).concat([line("target 99 %", COLORS.target, true)]),
          { scales: { x: { ticks: { maxTicksLimit: 8 } }, y: { min: 0, max: 100 } } });
    chart("chart-tps", "line", TIERS.map((t) => Object.assign(line(t, COLORS[t]), { fill: true })));
    chart("chart-demotions", "bar", [{ label: "hot → warm", backgroundColor: COLORS.hot, data: [] }]);
  }

  function updateCharts(data) {
    const s = data.series, labels = s.labels;
    const set = (id, arrays) => {
      const c = charts[id];
      c.data.labels = labels;
      arrays.forEach((a, i) => { c.data.datasets[i].data = a; });
      c.update("none");
    };
    const target = labels.map(() => data.targets.hot_ttft_ms);
    set("chart-ttft", [s.hot.ttft_p99_ms, s.warm.ttft_p99_ms, target]);
    set("chart-attainment", [s.hot.attainment, s.warm.attainment, s.cold.attainment, labels.map(() => 99)]);
    set("chart-tps", TIERS.map((t) => s[t].tokens_per_s));
    set("chart-demotions", [s.hot.demotions]);
  }

  function countdown(deadline, finished) {
    if (finished) return "done";
    const left = (new Date(deadline) - Date.now()) / 1000;
    if (left <= 0) return "overdue";
    const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), sec = Math.floor(left % 60);
    return (h ? h + "h " : "") + String(m).padStart(2, "0") + "m " + String(sec).padStart(2, "0") + "s";
  }

  function renderJobs() {
    const body = document.getElementById("jobs");
    body.replaceChildren();
    if (!batches.length) {
      const tr = el("tr"); tr.appendChild(el("td", { colspan: 4, class: "muted" }, "No batches."));
      body.appendChild(tr); return;
    }
    batches.forEach((b) => {
      const tr = el("tr", { "data-batch": b.id });
      tr.appendChild(el("td", {}, b.id));
      tr.appendChild(el("td", {}, b.status));
      const cell = el("td"), bar = el("div", { class: "progress", title: b.completed + "/" + b.total });
      const done = el("span"), failed = el("span", { class: "failed" });
      const total = Math.max(1, b.total);
      done.style.width = (100 * b.completed / total) + "%";
      failed.style.width = (100 * b.failed / total) + "%";
      bar.style.display = "flex"; bar.append(done, failed); cell.append(bar, el("small", { class: "muted" }, b.completed + " / " + b.total));
      tr.appendChild(cell);
      const left = countdown(b.deadline, b.finished_at);
      tr.appendChild(el("td", { class: "countdown" + (left === "overdue" ? " late" : "") }, left));
      body.appendChild(tr);
    });
  }

  function renderViolations(list) {
    const body = document.getElementById("violations");
    body.replaceChildren();
    if (!list.length) {
      const tr = el("tr"); tr.appendChild(el("td", { colspan: 6, class: "muted" }, "No violations."));
      body.appendChild(tr); return;
    }
    const fmt = (v, term) => {
      if (v === null || v === undefined) return "–";
      if (/ttft|tbt/.test(term) && !/within/.test(term)) return ms(v * 1000);
      if (/rate|within|jobs|lines|demotions/.test(term)) return pct(v);
      return num(v, 1);
    };
    list.forEach((v) => {
      const tr = el("tr");
      tr.appendChild(el("td", {}, v.at.slice(0, 16).replace("T", " ") + (v.window !== "minute" ? " (" + v.window + ")" : "")));
      const tierCell = el("td"); tierCell.appendChild(el("span", { class: "tag " + v.tier }, v.tier)); tr.appendChild(tierCell);
      tr.appendChild(el("td", {}, v.label));
      tr.appendChild(el("td", {}, fmt(v.target, v.term)));
      tr.appendChild(el("td", {}, fmt(v.actual, v.term)));
      const link = el("a", { class: "requests", href: root.dataset.requests + "&" + new URLSearchParams(
        { tier: v.tier, window: v.window, start: v.at, term: v.term }) }, "requests");
      const linkCell = el("td"); linkCell.appendChild(link); tr.appendChild(linkCell);
      body.appendChild(tr);
    });
  }

  function render(data) {
    const cards = document.getElementById("cards");
    cards.replaceChildren(...data.cards.map(card));
    updateCharts(data);
    batches = data.batches || [];
    renderJobs();
    renderViolations(data.violations || []);
    document.getElementById("updated").textContent = new Date(data.generated_at).toLocaleTimeString();
    root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);
  }

  async function poll() {
    const live = document.getElementById("live");
    try {
      const response = await fetch(URL_, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(response.status);
      render(await response.json());
      if (live) live.classList.remove("stale");
    } catch (err) {
      if (live) live.classList.add("stale");
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  initCharts();
  poll();
  setInterval(renderJobs, 1000);  // deadline countdowns tick between polls
})();
