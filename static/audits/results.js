// The audit results page: plotly charts of the shown run, and the progress of a running audit
// (polls GET /api/v1/audits/runs/<id> with the session; reloads when it ends).
(function () {
  "use strict";

  const COLORS = {
    failover_stale_replica: "#cf222e",
    former_master_without_pre_online_sync: "#9a6700",
    unclean_election: "#8250df",
    unknown: "#6b7785",
  };
  const layout = (title, extra) => Object.assign({
    title: { text: title }, margin: { t: 40, r: 20, b: 60, l: 60 }, barmode: "stack",
    legend: { orientation: "h" }, height: 360,
  }, extra || {});

  function draw() {
    const node = document.getElementById("audit-charts");
    const series = node ? JSON.parse(node.textContent) : null;
    if (!series || !document.getElementById("chart-rollbacks")) return;
    if (typeof Plotly === "undefined") {
      for (const el of document.querySelectorAll(".audit-chart")) el.innerHTML = '<p class="bad">plotly.js did not load: no chart.</p>';
      return;
    }
    const byCause = (rows) => rows.map((s) => ({
      type: "bar", name: s.name.replace(/_/g, " "), x: s.x, y: s.y, marker: { color: COLORS[s.name] },
    }));
    Plotly.newPlot("chart-rollbacks", byCause(series.rollbacksOverTime),
      layout("Rollbacks per hour by cause", { yaxis: { title: { text: "rollbacks" } } }), { responsive: true });
    const top = series.topGroups;
    Plotly.newPlot("chart-top-groups", [{
      type: "bar", orientation: "h", x: top.messagesAgain.slice().reverse(), y: top.groups.slice().reverse(),
      text: top.rollbacks.slice().reverse().map((n) => n + " rollback" + (n === 1 ? "" : "s")), marker: { color: "#2f6fb0" },
    }], layout("Top affected consumer groups (messages consumed again)", { margin: { t: 40, r: 20, b: 40, l: 160 } }),
    { responsive: true });
    Plotly.newPlot("chart-messages-again", byCause(series.messagesAgainOverTime),
      layout("Messages consumed again per hour by cause", { yaxis: { title: { text: "messages" } } }), { responsive: true });
  }

  function follow() {
    const box = document.getElementById("active-run");
    const url = box && box.dataset.runUrl;
    if (!url) return;
    const stage = document.getElementById("run-stage");
    const bar = document.getElementById("run-progress");
    const percent = document.getElementById("run-percent");
    const tick = async () => {
      try {
        const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (resp.ok) {
          const run = await resp.json();
          if (run.status !== "queued" && run.status !== "running") {
            window.location.replace(window.location.pathname);
            return;
          }
          stage.textContent = run.stage || run.status;
          bar.value = run.progress;
          percent.textContent = Math.round(run.progress * 100) + " %";
        }
      } catch (e) { /* the next tick retries */ }
      setTimeout(tick, 2000);
    };
    tick();
  }

  draw();
  follow();
})();
