// The Access control page (templates/dashboards/acl.html): an operator creates, updates or deletes a user,
// adds or changes a policy entry, deletes a policy or one resource's entry. Each form previews first (the
// service's dry run: the users the change would lock out of the cluster's known topics and groups, nothing
// changed), then applies exactly what was previewed (static/js/admin.js). A created user's secret key is
// in that one answer: shown once, with a note to copy it now.
"use strict";

(() => {
  const { element, table, previewThenApply } = Admin;
  const list = (text) => text.split(",").map((s) => s.trim()).filter((s) => s);

  const bodies = {
    "acl-create-user": (e) => ({
      username: e.username.value.trim(),
      ...(e.password.value ? { password: e.password.value } : {}),
      userType: e.userType.value,
      userStatus: e.userStatus.value,
    }),
    "acl-update-user": (e) => {
      const body = { username: e.username.value };
      if (e.userType.value) body.userType = e.userType.value;
      if (e.userStatus.value) body.userStatus = e.userStatus.value;
      if (e.password.value) body.password = e.password.value;
      return body;
    },
    "acl-delete-user": (e) => ({ username: e.username.value }),
    "acl-put-policy": (e) => {
      const entry = {
        resources: list(e.resources.value),
        actions: [...e.actions].filter((c) => c.checked).map((c) => c.value),
        decision: e.decision.value,
      };
      if (list(e.sourceIps.value).length) entry.sourceIps = list(e.sourceIps.value);
      return { subject: `User:${e.username.value}`, entries: [entry] };
    },
    "acl-delete-policy": (e) => ({
      username: e.username.value,
      ...(e.resource.value.trim() ? { resources: [e.resource.value.trim()] } : {}),
    }),
  };

  function lockouts(box, answer, applied) {
    if (!answer.lockouts.length) {
      box.append(element("p", "Locks nobody out of the cluster's known topics and groups.", "ok"));
      return;
    }
    box.append(element("p", `${applied ? "Locked out" : "Would lock out"}: ${answer.lockouts.length} ` +
      "(user, resource, action) the users could do before and cannot after.", "warn lockout-count"));
    box.append(table(["user", "resource", "action", "why"],
      answer.lockouts.map((lo) => [lo.username, lo.resource, lo.action, lo.reason]), "acl-lockouts"));
  }

  for (const [id, body] of Object.entries(bodies)) {
    const form = document.getElementById(id);
    if (!form) continue;
    previewThenApply(form, {
      url: () => form.dataset.url,
      body: () => body(form.elements),
      show: (box, answer, applied) => {
        box.append(element("div", applied
          ? `done: version ${answer.version}`
          : `preview at version ${answer.version}: nothing changed yet`, "head" + (applied ? " ok" : "")));
        lockouts(box, answer, applied);
        if (!applied) return;
        if (answer.password !== undefined) {
          box.append(element("p", `The secret key of ${answer.user.username}, shown this once: copy it now.`, "warn"));
          box.append(element("code", answer.password, "secret-key"));
          const reload = element("button", "Done, show the list");
          reload.type = "button";
          reload.addEventListener("click", () => window.location.reload());
          box.append(" ", reload);
          return;
        }
        setTimeout(() => window.location.reload(), 1500);
      },
    });
  }
})();
