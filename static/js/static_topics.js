// Static topics page (templates/dashboards/static_topics.html): an operator previews a move, a drain
// or a scale-out, then applies exactly what the preview showed (at its epoch: a change made meanwhile
// is refused with 2100 and nothing moves).
(() => {
  const post = window.postAction;

  function bodyOf(form) {
    const kind = form.elements.kind.value;
    const broker = form.elements.broker.value;
    if (kind === "move") return { moves: [{ queueId: Number(form.elements.queue.value), brokerName: broker }] };
    if (kind === "drain") return { drain: { brokerName: broker } };
    return { scaleOut: broker };
  }

  function headed(box, text) {
    box.hidden = false;
    box.innerHTML = "";
    const title = document.createElement("div");
    title.className = "head";
    title.textContent = text;
    box.append(title);
  }

  function fieldErrors(box, answer) {
    const pre = document.createElement("pre");
    pre.textContent = answer && answer.fields ? JSON.stringify(answer.fields) : "";
    box.append(pre);
  }

  function show(box, head, answer) {
    headed(box, head);
    if (answer.moves) {
      const table = document.createElement("table");
      table.className = "moves";
      const rows = [["queue", "consumers read to its end", "writes now, read next"]].concat(
        answer.moves.map((m) => [
          String(m.queueId),
          `${m.source.brokerName}/q${m.source.queueId}`,
          `${m.target.brokerName}/q${m.target.queueId}${m.reused ? " (reused)" : ""}`,
        ]),
      );
      rows.forEach((cells, i) => {
        const tr = table.insertRow();
        cells.forEach((text) => {
          const cell = document.createElement(i === 0 ? "th" : "td");
          cell.textContent = text;
          tr.append(cell);
        });
      });
      const kept = document.createElement("p");
      kept.textContent = `Old segments stay readable ${answer.oldSegmentsKeptHours} h after their last message.`;
      box.append(table, kept);
    } else {
      fieldErrors(box, answer);
    }
  }

  document.querySelectorAll("section.static-topic").forEach((section) => {
    const form = section.querySelector("form.remap");
    const box = section.querySelector(".remap-result");
    const apply = form.querySelector(".apply-button");
    let previewed = null;

    form.elements.kind.addEventListener("change", () => {
      form.elements.queue.hidden = form.elements.kind.value !== "move";
      apply.disabled = true;
    });
    [form.elements.queue, form.elements.broker].forEach((el) => el.addEventListener("change", () => (apply.disabled = true)));

    form.querySelector(".preview-button").addEventListener("click", async () => {
      const body = bodyOf(form);
      const { status, answer } = await post(form.dataset.url, { ...body, preview: true });
      if (status !== 200) {
        previewed = null;
        apply.disabled = true;
        show(box, `refused: ${answer.detail}`, answer);
        return;
      }
      previewed = { ...body, epoch: answer.epochBefore };
      apply.disabled = false;
      show(box, `preview at epoch ${answer.epochBefore}: nothing changed yet`, answer);
    });

    apply.addEventListener("click", async () => {
      if (!previewed) return;
      apply.disabled = true;
      const { status, answer } = await post(form.dataset.url, previewed);
      previewed = null;
      if (status !== 200) {
        show(box, `refused: ${answer.detail}`, answer);
        return;
      }
      show(box, `done: epoch ${answer.epochBefore} → ${answer.epoch}`, answer);
      section.querySelector(".epoch").textContent = String(answer.epoch);
      setTimeout(() => window.location.reload(), 1500);
    });
  });

  // More logical queues, a deletion, a plain topic made static: previewed (the mapping after, or what
  // goes), then applied at the epoch the preview showed.
  document.querySelectorAll("form.static-change").forEach((form) => {
    const box = form.nextElementSibling;
    const apply = form.querySelector(".apply-button");
    let previewed = null;
    const bodyOf = () => {
      if (form.elements.topic) return { topic: form.elements.topic.value.trim() };
      const kind = form.elements.change.value;
      return kind === "resize" ? { kind, queueNums: Number(form.elements.queueNums.value) } : { kind };
    };
    const say = (text, answer) => {
      headed(box, text);
      if (answer && answer.fields) fieldErrors(box, answer);
    };
    const describe = (answer, done) => {
      const verb = done ? "is" : "would be";
      if (!answer.after) return `${answer.before.topic} ${verb} deleted, with its topic on every broker set it names`;
      return `${answer.after.topic} ${verb} at epoch ${answer.after.epoch} with ${answer.after.queues.length} logical queues`;
    };
    form.querySelectorAll("select, input").forEach((el) => el.addEventListener("change", () => (apply.disabled = true)));
    form.querySelector(".preview-button").addEventListener("click", async () => {
      const body = bodyOf();
      const { status, answer } = await post(form.dataset.url, { ...body, preview: true });
      if (status !== 200) {
        previewed = null;
        apply.disabled = true;
        say(`refused: ${answer.detail}`, answer);
        return;
      }
      previewed = answer.before ? { ...body, epoch: answer.before.epoch } : body;
      apply.disabled = false;
      say(`preview: ${describe(answer, false)}; nothing changed yet`);
    });
    apply.addEventListener("click", async () => {
      if (!previewed) return;
      apply.disabled = true;
      const { status, answer } = await post(form.dataset.url, { ...previewed, preview: false });
      previewed = null;
      if (status !== 200) {
        say(`refused: ${answer.detail}`, answer);
        return;
      }
      say(`done: ${describe(answer, true)}`);
      setTimeout(() => window.location.reload(), 1500);
    });
  });
})();
