// A broker's page (templates/dashboards/broker.html): an operator types new values of dynamic keys,
// previews them (the broker checks them as broker.conf is checked and says old -> new), then applies
// them: the broker changes them at once and keeps them in its broker.conf.
"use strict";

(() => {
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const form = document.getElementById("config-form");
  if (!form || !page.actions) return;
  const { element, table, previewThenApply } = Admin;

  previewThenApply(form, {
    url: () => page.actions.config,
    body: () => {
      const updates = {};
      for (const input of form.querySelectorAll("input[name]")) {
        if (input.value.trim() !== "") updates[input.name] = input.value.trim();
      }
      if (!Object.keys(updates).length) throw new Error("type a new value for at least one dynamic key");
      return { updates };
    },
    show: (box, answer, applied) => {
      const failed = answer.brokers.filter((b) => b.error);
      box.append(element("div", !applied ? "preview: nothing changed yet"
        : failed.length ? `not applied: ${failed.map((b) => b.error).join("; ")}` : "done: applied and written to broker.conf",
      "head" + (applied ? (failed.length ? " bad" : " ok") : "")));
      const rows = [];
      for (const b of answer.brokers) {
        for (const [key, [before, after]] of Object.entries(b.changed || {})) rows.push([key, before, after]);
      }
      if (rows.length) box.append(table(["key", "old", "new"], rows, "config-changes"));
      else box.append(element("p", "No value differs from the broker's current one."));
      if (applied && !failed.length) {
        for (const [key, , after] of rows) {
          const cell = document.querySelector(`#broker-config tr[data-key="${CSS.escape(key)}"] [data-field="value"]`);
          if (cell) cell.textContent = after;
        }
      }
    },
  });
})();
