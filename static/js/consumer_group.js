// A consumer group's page (templates/dashboards/consumer_group.html): the lag chart and the queue
// table, refreshed from progress.json every page.pollMs (the brokers report every
// brokerStatusReportInterval, 2 s by default: polling at that pace shows every report), and the
// offset reset: a preview (per queue committed -> new, messages re-consumed or skipped), then Reset.
"use strict";

(() => {
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const $ = (id) => document.getElementById(id);
  const WINDOW_MS = 15 * 60 * 1000;

  // --- the lag chart: the group's total and each topic's -----------------------------------------

  const chart = { el: $("lag-chart"), traces: new Map(), ready: false, revision: 0 };
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];

  function trace(name, total) {
    let t = chart.traces.get(name);
    if (!t) {
      const color = total ? "#14324f" : COLORS[(chart.traces.size - 1 + COLORS.length) % COLORS.length];
      t = { x: [], y: [], name, type: "scatter", mode: "lines+markers", marker: { size: 4 }, line: { color, width: total ? 2.5 : 1.5 } };
      chart.traces.set(name, t);
    }
    return t;
  }

  function addPoints(at, progress) {
    const points = [["total", progress.lag, true]];
    const byTopic = new Map();
    for (const q of progress.queues) byTopic.set(q.topic, (byTopic.get(q.topic) || 0) + q.lag);
    if (byTopic.size > 1) for (const [topic, lag] of byTopic) points.push([topic, lag, false]);
    for (const [name, lag, total] of points) {
      const t = trace(name, total);
      t.x.push(at);
      t.y.push(lag);
      while (t.x.length && t.x[0] < at - WINDOW_MS) {
        t.x.shift();
        t.y.shift();
      }
    }
    chart.el.dataset.points = String(trace("total", true).x.length);
  }

  function draw() {
    if (!window.Plotly) {
      chart.el.innerHTML = '<p class="bad">plotly.js did not load: no chart.</p>';
      return;
    }
    if (!chart.ready) {
      chart.el.innerHTML = "";
      chart.ready = true;
    }
    chart.revision += 1; // the traces' arrays grow in place: the revision tells Plotly to redraw
    Plotly.react(chart.el, [...chart.traces.values()], {
      datarevision: chart.revision,
      margin: { l: 80, r: 20, t: 10, b: 40 },
      height: 300,
      legend: { orientation: "h", y: -0.2 },
      xaxis: { type: "date" },
      yaxis: { title: { text: "lag (messages)" }, tickformat: ",d", rangemode: "tozero" },
    }, { responsive: true, displaylogo: false });
  }

  function applyTable(progress) {
    Live.setText($("group-lag"), Live.grouped(progress.lag), true);
    for (const q of progress.queues) {
      const row = document.querySelector(`#group-queues tr[data-key="${CSS.escape(`${q.topic}/${q.brokerName}/${q.queueId}`)}"]`);
      if (!row) continue;
      for (const field of ["committedOffset", "minOffset", "maxOffset", "lag"]) {
        Live.setText(row.querySelector(`[data-field="${field}"]`), Live.grouped(q[field]), field !== "committedOffset");
      }
    }
    for (const t of progress.topics || []) {
      const row = document.querySelector(`#group-topics tr[data-topic="${CSS.escape(t.topic)}"]`);
      if (row) Live.setText(row.querySelector('[data-field="lag"]'), Live.grouped(t.lag), true);
    }
  }

  async function poll() {
    try {
      const response = await fetch(page.progressUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (response.ok) {
        const progress = await response.json();
        addPoints(progress.atMs, progress);
        applyTable(progress);
        draw();
      }
    } catch (err) {
      // the next poll tries again
    }
    setTimeout(poll, page.pollMs);
  }

  poll();

  // --- reset offsets ----------------------------------------------------------------------------

  const form = $("reset-form");
  if (!form || !page.actions) return;
  const { element, table, previewThenApply } = Admin;
  const e = form.elements;
  // The time field starts at "now" (UTC), a value the operator then moves back.
  e.time.value = new Date().toISOString().slice(0, 19);

  previewThenApply(form, {
    url: () => page.actions.reset,
    body: () => {
      const body = { topic: e.topic.value };
      if (e.mode.value === "time") {
        const ms = Date.parse(`${e.time.value}Z`);
        if (Number.isNaN(ms)) throw new Error("choose a time");
        body.timestampMs = ms;
      } else {
        body.offset = Number(e.offset.value);
      }
      return body;
    },
    show: (box, answer, applied) => {
      const to = answer.timestampMs !== undefined ? `the first message at or after ${Live.msTime(answer.timestampMs)} UTC`
        : answer.offset === -1 ? "each queue's end" : `offset ${answer.offset}`;
      const reconsumed = answer.queues.reduce((n, q) => n + q.reconsumed, 0);
      const skipped = answer.queues.reduce((n, q) => n + q.skipped, 0);
      let head;
      if (!applied) head = `preview: ${answer.group} on ${answer.topic} to ${to} — nothing changed yet`;
      else if (answer.applied) head = `done: ${answer.group} on ${answer.topic} reset to ${to}`;
      else head = `partly applied: ${(answer.failed || []).map((f) => `${f.brokerName}: ${f.error}`).join("; ")}`;
      box.append(element("div", head, "head" + (applied ? (answer.applied ? " ok" : " bad") : "")));
      box.append(element("p", `${Live.grouped(reconsumed)} messages consumed again, ${Live.grouped(skipped)} skipped`,
        skipped ? "warn" : ""));
      box.append(table(["broker set", "queue", "committed → new", "max offset", "re-consumed", "skipped"],
        answer.queues.map((q) => [q.brokerName, String(q.queueId),
          `${Live.grouped(q.committedOffset)} → ${Live.grouped(q.newOffset)}`, Live.grouped(q.maxOffset),
          Live.grouped(q.reconsumed), Live.grouped(q.skipped)]), "reset-queues"));
    },
  });
})();
