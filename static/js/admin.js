// What the operators' forms share (topics, consumer offsets, broker config): answers drawn as tables,
// refusals with their field errors, and "preview, then apply exactly what the preview showed": a
// form's Apply button is enabled by a successful preview and disabled again by any change to the form.
"use strict";

const Admin = (() => {
  function element(tag, content, className) {
    const el = document.createElement(tag);
    if (content !== undefined && content !== null) el.textContent = content;
    if (className) el.className = className;
    return el;
  }

  // head: the column titles; rows: arrays of cells (text or elements).
  function table(head, rows, className) {
    const t = element("table", undefined, className);
    const tr = t.createTHead().insertRow();
    head.forEach((h) => tr.append(element("th", h)));
    const body = t.createTBody();
    rows.forEach((cells) => {
      const row = body.insertRow();
      cells.forEach((c) => row.insertCell().append(c));
    });
    return t;
  }

  // A refused request: its detail and, per field, what is wrong (nested field errors flattened).
  function refusal(box, status, answer) {
    box.append(element("div", `refused (HTTP ${status}): ${answer.detail || "error"}`, "head bad"));
    const walk = (prefix, value) => {
      if (Array.isArray(value) && value.every((v) => typeof v !== "object")) {
        box.append(element("div", `${prefix}: ${value.join("; ")}`, "field-error bad"));
      } else if (value && typeof value === "object") {
        for (const [k, v] of Object.entries(value)) walk(prefix ? `${prefix}.${k}` : k, v);
      } else {
        box.append(element("div", `${prefix}: ${value}`, "field-error bad"));
      }
    };
    walk("", answer.fields || {});
  }

  // form: holds .preview-button, .apply-button and .admin-result; url(), body(): where and what to
  // send; show(box, answer, applied): draw an answer.
  function previewThenApply(form, { url, body, show }) {
    const box = form.querySelector(".admin-result");
    const apply = form.querySelector(".apply-button");
    let previewed = null;

    function start() {
      box.hidden = false;
      box.innerHTML = "";
      delete box.dataset.ok;
    }

    const invalidate = () => {
      previewed = null;
      apply.disabled = true;
    };
    form.addEventListener("input", invalidate);
    form.addEventListener("change", invalidate);

    form.querySelector(".preview-button").addEventListener("click", async () => {
      let chosen;
      try {
        chosen = body();
      } catch (err) {
        start();
        box.append(element("div", err.message, "head bad"));
        return;
      }
      const target = url();
      const { status, answer } = await window.postAction(target, { ...chosen, preview: true });
      start();
      if (status !== 200) {
        invalidate();
        refusal(box, status, answer);
        return;
      }
      previewed = { target, chosen };
      apply.disabled = false;
      show(box, answer, false);
    });

    apply.addEventListener("click", async () => {
      if (!previewed) return;
      const { target, chosen } = previewed;
      invalidate();
      box.dataset.ok = "pending";
      const { status, answer } = await window.postAction(target, chosen);
      start();
      if (status !== 200) {
        box.dataset.ok = "false";
        refusal(box, status, answer);
        return;
      }
      box.dataset.ok = "true";
      show(box, answer, true);
    });
  }

  return { element, table, refusal, previewThenApply };
})();
