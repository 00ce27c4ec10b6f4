// Topic administration (templates/dashboards/topics.html, topic.html): an operator previews a create
// or update (each broker set's queues and perm, old -> new, with what the change puts at risk) or a
// delete (the queues and messages that go, the consumer groups reading them), then applies exactly
// what the preview showed (static/js/admin.js).
"use strict";

(() => {
  const { element, table, previewThenApply } = Admin;
  const perm = (p) => (p & 4 ? "r" : "-") + (p & 2 ? "w" : "-");
  const count = (value) => (value === null || value === undefined ? "unknown" : Live.grouped(value));

  const form = document.getElementById("topic-form");
  if (form) {
    const describe = (q) => (q ? `${q.readQueueNums} / ${q.writeQueueNums}, ${perm(q.perm)}, ${q.messageType}` : "new");
    previewThenApply(form, {
      url: () => form.dataset.url,
      body: () => {
        const e = form.elements;
        const body = {
          topicName: e.topicName.value.trim(),
          readQueueNums: Number(e.readQueueNums.value),
          writeQueueNums: Number(e.writeQueueNums.value),
          perm: Number(e.perm.value),
        };
        if (e.messageType.value) body.attributes = { "message.type": e.messageType.value };
        if (e.target.value === "cluster") body.clusterName = e.clusterName.value;
        else body.brokerNames = [...e.brokerNames.selectedOptions].map((o) => o.value);
        return body;
      },
      show: (box, answer, applied) => {
        box.append(element("div", applied
          ? `done: ${answer.topicName} ${answer.created ? "created" : "updated"} on ${answer.brokerNames.join(", ")}`
          : `preview of ${answer.topicName}: nothing changed yet`, "head" + (applied ? " ok" : "")));
        box.append(table(["broker set", "read / write queues, perm, type: before", "after", "at risk"],
          answer.changes.map((c) => [c.brokerName, describe(c.before), describe(c.after),
            c.warnings.length ? element("span", c.warnings.join("; "), "warn") : "nothing"]), "topic-changes"));
        if (applied) setTimeout(() => window.location.reload(), 1500);
      },
    });
  }

  const del = document.getElementById("topic-delete");
  if (del) {
    previewThenApply(del, {
      url: () => del.dataset.url,
      body: () => (del.elements.scope.value === "everywhere"
        ? {} : { brokerNames: [...del.elements.brokerNames.selectedOptions].map((o) => o.value) }),
      show: (box, answer, applied) => {
        const where = answer.scope === "everywhere" ? "everywhere" : `on ${answer.scope.join(", ")}`;
        box.append(element("div", applied
          ? `deleted ${answer.topic} ${where}: ${answer.deletedQueueDatas} queue data removed`
          : `deleting ${answer.topic} ${where} would remove:`, "head" + (applied ? " ok" : "")));
        box.append(element("p", `${answer.queueCount} queues on ${answer.brokerSets.map((s) => s.brokerName).join(", ")}, ` +
          `holding ${Live.grouped(answer.messages)} messages${answer.unreported.length ? " and more unreported" : ""}`, "at-risk"));
        if (answer.queues.length) {
          box.append(table(["broker set", "queue", "min offset", "max offset", "messages"],
            answer.queues.map((q) => [q.brokerName, String(q.queueId), Live.grouped(q.minOffset), Live.grouped(q.maxOffset),
              Live.grouped(q.messages)]), "delete-queues"));
        }
        if (answer.unreported.length) {
          box.append(element("p", `No report from ${answer.unreported.join(", ")}: the messages there are unknown.`, "warn"));
        }
        if (answer.consumerGroups.length) {
          box.append(element("p", `${answer.consumerGroups.length} consumer groups read it:`, "warn"));
          box.append(table(["group", "lag on it", "lag, all its topics"],
            answer.consumerGroups.map((g) => [g.group, count(g.topicLag), count(g.lag)]), "delete-groups"));
        } else {
          box.append(element("p", "No consumer group has committed an offset on it."));
        }
      },
    });
  }
})();
