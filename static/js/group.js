// The replica-group page: the water-level chart (history, then live points), the controller state
// applied in place, and the operator actions, each behind a confirmation dialog.
"use strict";

(() => {
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const $ = (id) => document.getElementById(id);
  const rowOf = (brokerId) => document.querySelector(`#members tr[data-broker-id="${brokerId}"]`);
  const cell = (row, field) => row && row.querySelector(`[data-field="${field}"]`);
  const state = { ...page.state, isolated: null };
  const knownEpochs = new Set(page.epochs);

  // --- the water-level chart --------------------------------------------------------------------

  const WINDOW_MS = page.historyMinutes * 60 * 1000;
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  const chart = {
    el: $("water-chart"),
    traces: new Map(), // "max:<id>" | "confirm:<id>" | "lag:<id>" -> plotly trace
    colors: new Map(), // broker id -> color
    latest: 0,
    revision: 0,
    ready: false,
    pending: false,
  };

  function trace(metric, brokerId) {
    const key = `${metric}:${brokerId}`;
    let t = chart.traces.get(key);
    if (!t) {
      if (!chart.colors.has(brokerId)) chart.colors.set(brokerId, COLORS[chart.colors.size % COLORS.length]);
      const color = chart.colors.get(brokerId);
      const styles = {
        max: { name: `maxOffset ${brokerId}`, line: { color, width: 2 } },
        confirm: { name: `confirmOffset ${brokerId}`, line: { color, width: 1, dash: "dash" } },
        lag: { name: `lag bytes ${brokerId}`, line: { color, width: 1.5 }, yaxis: "y2" },
      };
      t = { x: [], y: [], type: "scatter", mode: "lines", legendgroup: String(brokerId), ...styles[metric] };
      chart.traces.set(key, t);
    }
    return t;
  }

  function addPoint(metric, brokerId, x, y) {
    if (y === null || y === undefined) return;
    const t = trace(metric, brokerId);
    t.x.push(x);
    t.y.push(y);
    if (x > chart.latest) chart.latest = x;
  }

  function trim() {
    const cutoff = chart.latest - WINDOW_MS;
    for (const t of chart.traces.values()) {
      let n = 0;
      while (n < t.x.length && t.x[n] < cutoff) n++;
      if (n) {
        t.x.splice(0, n);
        t.y.splice(0, n);
      }
    }
  }

  const LAYOUT = {
    margin: { l: 80, r: 20, t: 10, b: 40 },
    height: 420,
    hovermode: "x unified",
    legend: { orientation: "h", y: -0.15 },
    xaxis: { type: "date", anchor: "y2" },
    yaxis: { title: { text: "offset (bytes)" }, domain: [0.38, 1], tickformat: ",d", rangemode: "tozero" },
    yaxis2: { title: { text: "lag (bytes)" }, domain: [0, 0.28], tickformat: ",d", rangemode: "tozero" },
  };

  function draw() {
    chart.pending = false;
    if (!window.Plotly) return;
    trim();
    const data = [...chart.traces.values()].sort((a, b) => a.legendgroup.localeCompare(b.legendgroup));
    chart.revision += 1;
    const layout = { ...LAYOUT, datarevision: chart.revision };
    if (!chart.ready) {
      chart.el.innerHTML = "";
      chart.ready = true;
    }
    Plotly.react(chart.el, data, layout, { responsive: true, displaylogo: false });
  }

  function redraw() {
    if (!chart.pending) {
      chart.pending = true;
      requestAnimationFrame(draw);
    }
  }

  async function loadHistory() {
    if (!window.Plotly) {
      chart.el.innerHTML = '<p class="bad">plotly.js did not load: no chart.</p>';
      return;
    }
    try {
      const response = await fetch(page.historyUrl, { headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const history = await response.json();
      for (const s of history.samples) {
        const x = Date.parse(s.at);
        addPoint("max", s.brokerId, x, s.maxOffset);
        addPoint("confirm", s.brokerId, x, s.confirmOffset);
        addPoint("lag", s.brokerId, x, s.lagBytes);
      }
    } catch (err) {
      chart.el.innerHTML = `<p class="bad">The history did not load (${err.message}); live points follow.</p>`;
    }
    draw();
  }

  // --- live updates -----------------------------------------------------------------------------

  const isMaster = (role) => typeof role === "string" && role.includes("MASTER");

  function applyLevels(reports) {
    for (const r of reports) {
      const x = r.reportedAtMs;
      // A broker's own report: matched by address (a controller-mode master registers with the
      // nameserver as id 0 but reports its controller id), else by id.
      const row = document.querySelector(`#members tr[data-address="${CSS.escape(r.brokerAddr || "")}"]`) || rowOf(r.brokerId);
      if (row) {
        Live.setText(cell(row, "maxOffset"), Live.grouped(r.maxOffset), true);
        Live.setText(cell(row, "confirmOffset"), Live.grouped(r.confirmOffset), true);
        Live.setText(cell(row, "lastHeartbeat"), Live.msTime(x), true);
        if (r.role) Live.setText(cell(row, "role"), r.role);
        if (isMaster(r.role)) Live.setText(cell(row, "lagBytes"), Live.grouped(0), true);
      }
      const id = row ? Number(row.dataset.brokerId) : r.brokerId;
      addPoint("max", id, x, r.maxOffset);
      addPoint("confirm", id, x, r.confirmOffset);
      for (const s of r.slaves || []) {
        const slaveRow = rowOf(s.brokerId);
        if (slaveRow) {
          Live.setText(cell(slaveRow, "ackOffset"), Live.grouped(s.ackOffset), true);
          Live.setText(cell(slaveRow, "lagBytes"), Live.grouped(s.lagBytes), true);
          const behindMs = s.lagBytes > 0 && s.lastCaughtUpMs ? x - s.lastCaughtUpMs : 0;
          Live.setText(cell(slaveRow, "lagSeconds"), (Math.max(0, behindMs) / 1000).toFixed(1), true);
        }
        addPoint("lag", s.brokerId, x, s.lagBytes);
      }
    }
    if (chart.ready) redraw();
  }

  function applyState(next) {
    const masterChanged = next.masterBrokerId !== state.masterBrokerId || next.masterEpoch !== state.masterEpoch;
    Live.setText($("master-id"), next.masterBrokerId === null ? "none" : next.masterBrokerId);
    Live.setText($("master-address"), next.masterAddress || "");
    const acting = next.actingMaster || null;
    const actingBadge = $("acting-master");
    if (actingBadge) {
      actingBadge.hidden = !acting;
      actingBadge.dataset.agreement = acting ? acting.agreement : "none";
      actingBadge.dataset.brokerId = acting && acting.brokerId !== null && acting.brokerId !== undefined ? acting.brokerId : "";
      Live.setText(actingBadge, acting ? acting.text : "");
    }
    Live.setText($("master-epoch"), next.masterEpoch);
    Live.setText($("sync-state-set"), Live.idSet(next.syncStateSet));
    Live.setText($("sync-state-set-epoch"), next.syncStateSetEpoch);
    const inSet = new Set(next.syncStateSet || []);
    const isolated = new Set(next.isolated || []);
    for (const row of document.querySelectorAll("#members tr[data-broker-id]")) {
      const id = Number(row.dataset.brokerId);
      row.classList.toggle("master", id === next.masterBrokerId);
      if (masterChanged && next.masterBrokerId !== null) {
        Live.setText(cell(row, "role"), id === next.masterBrokerId ? "MASTER" : "SLAVE");
      }
      Live.setText(cell(row, "inSyncStateSet"), inSet.has(id) ? "yes" : "no");
      if (next.isolated) {
        const isIsolated = isolated.has(id);
        Live.setText(cell(row, "isolated"), isIsolated ? "yes" : "no");
        cell(row, "isolated").classList.toggle("bad", isIsolated);
        const isolateButton = $(`isolate-${id}`);
        const unisolateButton = $(`unisolate-${id}`);
        if (isolateButton) isolateButton.hidden = isIsolated;
        if (unisolateButton) unisolateButton.hidden = !isIsolated;
      }
    }
    if (page.controllerManaged) {
      Live.applyHealth($("health"), $("health-reasons"), next, document.querySelectorAll("#members tr[data-broker-id]").length);
    }
    if (next.masterEpoch !== null && next.masterEpoch !== undefined && !knownEpochs.has(next.masterEpoch)) {
      knownEpochs.add(next.masterEpoch);
      addEpoch(next, state.masterBrokerId);
    }
    if (next.syncStateSetEpoch !== state.syncStateSetEpoch) addJournalEntry(next, state.syncStateSet);
    if (masterChanged || next.syncStateSetEpoch !== state.syncStateSetEpoch) {
      logResult(`update: master ${next.masterBrokerId === null ? "none" : next.masterBrokerId}, ` +
        `epoch ${next.masterEpoch}, SyncStateSet ${Live.idSet(next.syncStateSet)} (epoch ${next.syncStateSetEpoch})`);
    }
    Object.assign(state, next);
  }

  const idOrNone = (id) => (id === null || id === undefined ? "none" : String(id));

  // A new first row in a history table (newest first), replacing its "nothing yet" row.
  function prependRow(tableId, epoch, cells) {
    const body = $(tableId).tBodies[0];
    const placeholder = body.querySelector("tr.none");
    if (placeholder) placeholder.remove();
    const row = body.insertRow(0);
    row.dataset.epoch = epoch;
    for (const content of cells) row.insertCell().append(content);
    Live.flash(row);
    return row;
  }

  function addJournalEntry(next, previous) {
    const change = document.createElement("span");
    const now = document.createElement("b");
    now.textContent = Live.idSet(next.syncStateSet);
    change.append(`${Live.idSet(previous)} → `, now);
    prependRow("sync-state-set-journal", next.syncStateSetEpoch,
      [Live.msTime(Date.now()), String(next.syncStateSetEpoch), change, "—", "—"]);
  }

  function addEpoch(next, previousMaster) {
    // The timeline shows the epochs that got a master (as the page renders it); every election is listed.
    if (next.masterBrokerId !== null && next.masterBrokerId !== undefined) {
      const timeline = $("epoch-timeline");
      const none = timeline.querySelector(".none");
      if (none) none.remove();
      const item = document.createElement("li");
      item.dataset.epoch = next.masterEpoch;
      const label = document.createElement("b");
      label.textContent = `epoch ${next.masterEpoch}`;
      const time = document.createElement("time");
      time.textContent = Live.msTime(Date.now());
      item.append(label, ` master ${next.masterBrokerId} `, time);
      timeline.append(item);
      Live.flash(item);
    }
    // The election's candidates and trigger are in the history: the next page load shows them.
    const link = document.createElement("a");
    link.href = location.pathname;
    link.textContent = "reload for the candidates";
    const winner = document.createElement("b");
    winner.textContent = idOrNone(next.masterBrokerId);
    const change = document.createElement("span");
    change.append(`${idOrNone(previousMaster)} → `, winner);
    prependRow("elections", next.masterEpoch, [Live.msTime(Date.now()), String(next.masterEpoch), "—", "—", change, link, "—"]);
  }

  Live.connect(page.brokerName, (message) => {
    if (message.brokerName !== page.brokerName) return;
    if (message.kind === "water_levels") applyLevels(message.data.reports || []);
    else if (message.kind === "state") applyState(message.data);
  });

  loadHistory();

  // --- operator actions -------------------------------------------------------------------------

  const result = $("action-result");

  function logResult(text, cls) {
    if (!result || result.hidden) return; // only after an action: the outcome as it unfolds
    const line = document.createElement("div");
    line.className = "log " + (cls || "");
    line.textContent = `${Live.msTime(Date.now())} ${text}`;
    result.append(line);
  }

  if (!page.actions) return;

  const dialog = $("action-dialog");
  const post = window.postAction;
  let pending = null; // the action the confirm button runs
  let previewSeq = 0;

  function ask(title, body, action, { elect = false, clean = false, drill = false } = {}) {
    $("dialog-title").textContent = title;
    $("dialog-body").textContent = body;
    $("elect-options").hidden = !elect;
    $("clean-options").hidden = !clean;
    $("drill-options").hidden = !drill;
    $("confirm-action").disabled = clean || drill; // these wait for their preview
    pending = action;
    dialog.showModal();
  }

  async function run(label, url, body) {
    result.hidden = false;
    result.innerHTML = "";
    const head = document.createElement("div");
    head.className = "head";
    head.textContent = `${label}: sending…`;
    const pre = document.createElement("pre");
    result.append(head, pre);
    try {
      const { status, answer } = await post(url, body);
      const ok = status < 300 && answer.ok !== false;
      head.textContent = `${label}: ${ok ? "done" : "refused"} (HTTP ${status})` + (answer.detail ? ` — ${answer.detail}` : "");
      head.className = "head " + (ok ? "ok" : "bad");
      result.dataset.ok = String(ok);
      pre.textContent = JSON.stringify(answer, null, 2);
      return ok ? answer : null;
    } catch (err) {
      head.textContent = `${label}: failed (${err.message})`;
      head.className = "head bad";
      result.dataset.ok = "false";
      return null;
    }
  }

  // Both directions stay reachable without waiting for the live update: the answer flips the buttons.
  function showIsolated(brokerId, isolated) {
    const isolateButton = $(`isolate-${brokerId}`);
    const unisolateButton = $(`unisolate-${brokerId}`);
    if (isolateButton) isolateButton.hidden = isolated;
    if (unisolateButton) unisolateButton.hidden = !isolated;
    const row = rowOf(brokerId);
    if (row) {
      Live.setText(cell(row, "isolated"), isolated ? "yes" : "no");
      cell(row, "isolated").classList.toggle("bad", isolated);
    }
  }

  async function preview() {
    const seq = ++previewSeq;
    const target = $("elect-target").value;
    const box = $("elect-preview");
    box.innerHTML = '<p class="muted">Asking the controller who would win…</p>';
    const url = new URL(page.actions.electPreview, location.href);
    if (target !== "") url.searchParams.set("brokerId", target);
    let status, answer;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      status = response.status;
      answer = await response.json();
    } catch (err) {
      status = 0;
      answer = { detail: err.message };
    }
    if (seq !== previewSeq) return; // the operator picked another replica meanwhile
    box.innerHTML = "";
    const lines = [];
    if (status >= 300) {
      lines.push(["bad", `No preview (HTTP ${status}): ${answer.detail || "error"}`]);
    } else {
      lines.push(["", answer.winner === null || answer.winner === undefined
        ? "Winner: none — no replica would be elected"
        : `Winner: replica ${answer.winner}`]);
      lines.push(["", `Data at risk: ${Live.grouped(answer.dataAtRiskBytes)} bytes`]);
      if (answer.detail) lines.push(["muted", answer.detail]);
    }
    for (const [cls, text] of lines) {
      const p = document.createElement("p");
      p.className = cls;
      p.textContent = text;
      box.append(p);
    }
    if (answer.unclean) {
      const warning = document.createElement("p");
      warning.id = "unclean-warning";
      warning.className = "warning";
      warning.textContent = "Unclean election: the candidate is outside the SyncStateSet. Messages it has not " +
        "replicated are lost, and acknowledged sends may be among them.";
      box.append(warning);
    }
    box.dataset.winner = answer.winner ?? "";
  }

  $("elect-button").addEventListener("click", () => {
    $("elect-target").value = "";
    ask("Elect a master", `Elect a new master for ${page.brokerName}. The current master ` +
      `(${state.masterBrokerId === null ? "none" : state.masterBrokerId}, epoch ${state.masterEpoch}) steps down.`, () => {
      const target = $("elect-target").value;
      const brokerId = target === "" ? null : Number(target);
      return run(brokerId === null ? "Elect master (automatic)" : `Elect replica ${brokerId}`, page.actions.elect, { brokerId });
    }, { elect: true });
    preview();
  });
  $("elect-target").addEventListener("change", preview);

  for (const button of document.querySelectorAll("#members button[data-isolate]")) {
    const brokerId = Number(button.dataset.brokerId);
    const isolated = button.dataset.isolate === "true";
    button.addEventListener("click", () => {
      ask(isolated ? `Isolate broker ${brokerId}` : `Un-isolate broker ${brokerId}`,
        isolated
          ? `Broker ${brokerId} leaves the topic routes, stops taking writes and is no candidate in elections.`
          : `Broker ${brokerId} returns to the topic routes and to elections.`,
        async () => {
          const answer = await run(isolated ? `Isolate ${brokerId}` : `Un-isolate ${brokerId}`, page.actions.isolate, { brokerId, isolated });
          if (answer && answer.after) showIsolated(brokerId, answer.after.isolated);
        });
    });
  }

  $("wipe-write-perm").addEventListener("click", () => ask("Wipe write permission",
    `Every topic of ${page.brokerName} becomes read-only: producers send elsewhere.`,
    () => run("Wipe write permission", page.actions.writePerm, { writable: false })));
  $("add-write-perm").addEventListener("click", () => ask("Add write permission",
    `Topics of ${page.brokerName} take writes again.`,
    () => run("Add write permission", page.actions.writePerm, { writable: true })));

  // A preview's lines ([class, text, id?]) in place of what the box showed.
  function paragraphs(box, lines) {
    box.innerHTML = "";
    for (const [cls, text, id] of lines) {
      const p = document.createElement("p");
      p.className = cls;
      p.textContent = text;
      if (id) p.id = id;
      box.append(p);
    }
  }

  // Clean broker metadata: the controller's own rule previews what would go (or why it refuses)
  // each time the ticked replicas change; Confirm only follows a preview it would carry out.
  const cleanIds = () => [...document.querySelectorAll("#clean-options input[type=checkbox]:checked")].map((c) => Number(c.value));
  let cleanSeq = 0;

  async function previewClean() {
    const seq = ++cleanSeq;
    const box = $("clean-preview");
    $("confirm-action").disabled = true;
    paragraphs(box, [["muted", "Asking the controller what would be removed…"]]);
    const { status, answer } = await post(page.actions.clean, { brokerIds: cleanIds(), preview: true });
    if (seq !== cleanSeq) return;
    if (status >= 300) {
      paragraphs(box, [["bad", `No preview (HTTP ${status}): ${answer.detail || "error"}`]]);
    } else if (!answer.ok) {
      paragraphs(box, [["bad", `Refused by the controller (${answer.result}): ${answer.detail}`, "clean-refused"]]);
    } else {
      const removed = answer.removed.map((r) => `${r.brokerId} (${r.address})`).join(", ");
      const lines = [["", answer.dropsSet ? `The whole set goes: ${removed}. Its epochs start again.` : `Removed: ${removed || "nothing"}`]];
      if (answer.masterCleared) lines.push(["warning", "The master's id is removed: the set has no master until an election."]);
      if (answer.after && !answer.dropsSet) lines.push(["muted", `SyncStateSet after: ${Live.idSet(answer.after.syncStateSet)}`]);
      paragraphs(box, lines);
      $("confirm-action").disabled = false;
    }
  }

  const cleanButton = $("clean-button");
  if (cleanButton) {
    cleanButton.addEventListener("click", () => {
      for (const box of document.querySelectorAll("#clean-options input[type=checkbox]")) box.checked = false;
      ask("Clean broker metadata", `Remove replicas of ${page.brokerName} from the controller's metadata ` +
        "(cleanBrokerData). A replica still heartbeating is refused.", () => {
        const ids = cleanIds();
        return run(ids.length ? `Clean ${ids.join(", ")}` : "Clean the whole set", page.actions.clean, { brokerIds: ids });
      }, { clean: true });
      previewClean();
    });
    for (const box of document.querySelectorAll("#clean-options input[type=checkbox]")) box.addEventListener("change", previewClean);
  }

  // Failover drill: the preview names who takes over and the data at risk (or why it is refused);
  // the run answers once the new master serves, with the RTO it measured, and joins the drills table.
  let drillSeq = 0;
  const drillTarget = () => ($("drill-target").value === "" ? null : Number($("drill-target").value));

  async function previewDrill() {
    const seq = ++drillSeq;
    $("confirm-action").disabled = true;
    paragraphs($("drill-preview"), [["muted", "Asking the controller who would take over…"]]);
    const { status, answer } = await post(page.actions.drill, { brokerId: drillTarget(), preview: true });
    if (seq !== drillSeq) return;
    if (status >= 300) {
      paragraphs($("drill-preview"), [["bad", `Refused (HTTP ${status}): ${answer.detail || "error"}`, "drill-refused"]]);
      return;
    }
    const risk = answer.dataAtRiskBytes === null ? "unknown" : `${Live.grouped(answer.dataAtRiskBytes)} bytes`;
    paragraphs($("drill-preview"), [
      ["", `Replica ${answer.toBrokerId} (${answer.toBrokerAddr}) takes over from ${answer.fromBrokerId} at epoch ${answer.masterEpoch + 1}.`],
      [answer.dataAtRiskBytes ? "warning" : "", `Data at risk: ${risk} (its lag behind the master, from ${answer.figuresFrom}).`],
      ["muted", "Writes pause until the new master serves; the drill measures how long (the RTO)."],
    ]);
    $("confirm-action").disabled = false;
  }

  function addDrillRow(d) {
    const grouped = (v) => (v === null || v === undefined ? "—" : Live.grouped(v));
    const cells = [Live.msTime(Date.parse(d.startedAt)), d.actor, `${d.fromBrokerId} → ${d.toBrokerId}`,
      `${d.oldEpoch} → ${d.newEpoch ?? "—"}`, grouped(d.rtoMs), grouped(d.dataAtRiskBytes), grouped(d.dataLostBytes), d.outcome];
    const row = prependRow("drills", d.newEpoch ?? "", cells);
    row.dataset.drillId = d.id;
    row.title = d.detail;
  }

  const drillButton = $("drill-button");
  if (drillButton) {
    drillButton.addEventListener("click", () => {
      $("drill-target").value = "";
      ask("Failover drill", `Switch ${page.brokerName} over to an in-sync replica on purpose and measure the RTO ` +
        "and the data at risk.", async () => {
        const answer = await run("Failover drill", page.actions.drill, { brokerId: drillTarget() });
        if (answer) {
          logResult(`drill ${answer.outcome}: RTO ${answer.rtoMs ?? "—"} ms, data at risk ${answer.dataAtRiskBytes ?? "unknown"} bytes, ` +
            `lost ${answer.dataLostBytes ?? "unknown"} bytes — ${answer.detail}`, answer.outcome === "ok" ? "ok" : "bad");
          addDrillRow(answer);
        }
      }, { drill: true });
      previewDrill();
    });
    $("drill-target").addEventListener("change", previewDrill);
  }

  $("cancel-action").addEventListener("click", () => {
    pending = null;
    dialog.close();
  });
  $("confirm-action").addEventListener("click", () => {
    const action = pending;
    pending = null;
    dialog.close();
    if (action) action();
  });
})();
