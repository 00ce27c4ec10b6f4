// The overview: controller state changes of every replica group, applied in place to its row.
"use strict";

(() => {
  const rows = new Map();
  for (const row of document.querySelectorAll("tr[data-broker-name]")) rows.set(row.dataset.brokerName, row);

  function applyState(row, state) {
    // The master cell as dashboards/templatetags/overview_rows.py renders it: the master, else the
    // acting master the routes show, else "no master"; and the acting-master state, if any.
    const master = row.querySelector('[data-field="master"]');
    const hasMaster = state.masterBrokerId !== null && state.masterBrokerId !== undefined;
    const acting = state.actingMaster || null;
    const cell = document.createElement("td");
    if (hasMaster) {
      const id = document.createElement("b");
      id.textContent = state.masterBrokerId;
      const addr = document.createElement("span");
      addr.className = "addr";
      addr.textContent = state.masterAddress || "";
      cell.append(id, " ", addr);
    } else if (!acting || acting.brokerId === null || acting.brokerId === undefined) {
      const none = document.createElement("span");
      none.className = "bad";
      none.textContent = "no master";
      cell.append(none);
    }
    const badge = Live.actingBadge(acting);
    if (badge) {
      if (cell.childNodes.length) cell.append(" ");
      cell.append(badge);
    }
    if (master.innerHTML !== cell.innerHTML) {
      master.replaceChildren(...cell.childNodes);
      Live.flash(master);
    }
    Live.setText(row.querySelector('[data-field="masterEpoch"]'), state.masterEpoch);
    Live.setText(row.querySelector('[data-field="syncStateSet"]'), Live.idSet(state.syncStateSet));
    if (row.hasAttribute("data-controller-managed")) {
      const replicas = Number(row.querySelector('[data-field="replicas"]').textContent);
      row.dataset.health = Live.applyHealth(row.querySelector('[data-field="health"]'), row.querySelector("ul.reasons"),
        state, replicas);
    }
  }

  Live.connect("*", (message) => {
    const row = rows.get(message.brokerName);
    if (row && message.kind === "state") applyState(row, message.data);
  });

  // Client-side filters: by name and health.
  const filter = document.getElementById("group-filter");
  const unhealthy = document.getElementById("unhealthy-only");
  function applyFilter() {
    const text = filter.value.trim().toLowerCase();
    for (const [name, row] of rows) {
      row.hidden = (text && !name.toLowerCase().includes(text)) || (unhealthy.checked && row.dataset.health === "ok");
    }
  }
  if (filter && unhealthy) {
    filter.addEventListener("input", applyFilter);
    unhealthy.addEventListener("change", applyFilter);
  }
})();
