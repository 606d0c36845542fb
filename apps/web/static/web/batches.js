// Live batch list: polls progress.json every 2 s and swaps the rows when something changed.
"use strict";
(() => {
  const table = document.querySelector("table.batches");
  const rows = document.getElementById("batch-rows");
  const live = document.getElementById("batches-live");
  let last = null;
  async function poll() {
    try {
      const response = await fetch(table.dataset.url, {headers: {Accept: "application/json"}});
      if (!response.ok) throw new Error(response.status);
      const data = await response.json();
      const key = JSON.stringify(data.batches);
      if (key !== last) {
        rows.innerHTML = data.html;
        last = key;
      }
      live.classList.remove("stale");
    } catch (err) {
      live.classList.add("stale");
    }
  }
  poll();
  setInterval(poll, 2000);
})();
