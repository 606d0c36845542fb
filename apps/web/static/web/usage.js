// The usage page's two charts (vendored Chart.js, the dashboard's copy): tokens and requests
// per UTC day, stacked by tier, with the 429s beside the requests.
"use strict";
(() => {
  const data = JSON.parse(document.getElementById("usage-data").textContent);
  const TIER = data.tiers;
  const COLORS = {[TIER.HOT]: "#c8402b", [TIER.WARM]: "#9a6b00", [TIER.COLD]: "#2367b3"};
  const tiers = Object.values(TIER);
  const bars = (column) => tiers.map((t) => ({label: t, data: data.by_day[t][column],
                                             backgroundColor: COLORS[t], stack: "tiers"}));
  const options = {animation: false, responsive: true, maintainAspectRatio: false,
                   interaction: {mode: "index", intersect: false},
                   plugins: {legend: {position: "bottom", labels: {boxWidth: 12}}},
                   scales: {x: {stacked: true}, y: {stacked: true, beginAtZero: true}}};
  new Chart(document.getElementById("chart-tokens"),
            {type: "bar", data: {labels: data.labels, datasets: bars("tokens")}, options});
  const refused = tiers.map((t) => data.by_day[t].rejected_429)
    .reduce((sum, a) => sum.map((v, i) => v + a[i]));
  new Chart(document.getElementById("chart-requests"), {type: "bar", options, data: {
    labels: data.labels,
    datasets: [...bars("requests"), {label: "429s", data: refused, backgroundColor: "#8a93a6",
                                     stack: "refused"}]}});
})();
