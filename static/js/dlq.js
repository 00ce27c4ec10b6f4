// The Dead letters page (templates/dashboards/dlq.html): an operator selects dead letters (or all), previews
// the resend (what would go to which topic, nothing sent), then resends exactly what was previewed, under
// the preview's request id: a repeat sends nothing twice (static/js/admin.js's preview-then-apply).
"use strict";

(() => {
  const { element, table, previewThenApply } = Admin;
  const form = document.getElementById("dlq-resend");
  if (!form || !form.querySelector(".preview-button")) return;
  const boxes = () => [...form.querySelectorAll("input[name=msgIds]")];
  const all = document.getElementById("dlq-all");
  if (all) all.addEventListener("change", () => boxes().forEach((b) => { b.checked = all.checked; }));
  const requestId = () => [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");

  previewThenApply(form, {
    url: () => form.dataset.url,
    body: () => {
      if (form.elements.all.checked) return { all: true, requestId: requestId() };
      const msgIds = boxes().filter((b) => b.checked).map((b) => b.value);
      if (!msgIds.length) throw new Error("select the dead letters to resend, or tick every dead letter");
      return { msgIds, requestId: requestId() };
    },
    show: (box, answer, applied) => {
      const n = answer.resent.length;
      box.append(element("div", applied
        ? `resent ${n} message(s)${answer.applied ? "" : " in part"}`
        : `preview: ${n} message(s) would be resent; nothing sent yet`, "head" + (applied ? " ok" : "")));
      box.append(table(["message id", "broker", "to topic", "new message id", "already resent"],
        answer.resent.map((r) => [r.msgId || "", r.brokerName, r.originTopic, r.newMsgId || "", r.already ? "yes" : "no"]),
        "dlq-resent"));
      (answer.failed || []).forEach((f) => box.append(element("p", `${f.brokerName} did not resend: ${f.error}`, "bad")));
    },
  });
})();
