// The dashboard's websocket (/ws/dashboard/, docs in dashboards/live.py) and the formatting shared by
// the pages (the same as dashboards/templatetags/dashboard_format.py). No polling: the server pushes
// at most one update per second per replica group; on a dropped socket we reconnect with back-off.
"use strict";

const Live = (() => {
  const NBSP = "\u202f";

  function grouped(value) {
    if (value === null || value === undefined) return "—";
    return String(Math.trunc(value)).replace(/\B(?=(\d{3})+(?!\d))/g, NBSP);
  }

  function msTime(ms) {
    if (ms === null || ms === undefined) return "—";
    return new Date(ms).toISOString().slice(0, 19).replace("T", " ");
  }

  function idSet(ids) {
    return "{" + [...(ids || [])].sort((a, b) => a - b).join(", ") + "}";
  }

  // Changes of state flash; values that move every second (offsets, heartbeats) pass quiet = true.
  function setText(el, text, quiet = false) {
    if (el && el.textContent !== String(text)) {
      el.textContent = text;
      if (!quiet) flash(el);
    }
  }

  function flash(el) {
    el.classList.remove("changed");
    void el.offsetWidth; // restart the CSS animation
    el.classList.add("changed");
  }

  function status(state, text) {
    const el = document.getElementById("live-status");
    if (el) {
      el.dataset.state = state;
      el.textContent = text;
    }
  }

  // subscribe: "<brokerName>" or "*"; onUpdate(message) for every {"type": "update"} message.
  function connect(subscribe, onUpdate) {
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/dashboard/";
    let delay = 500;
    let socket = null;

    function open() {
      status("connecting", "connecting…");
      socket = new WebSocket(url);
      socket.addEventListener("open", () => {
        delay = 500;
        socket.send(JSON.stringify({ subscribe }));
      });
      socket.addEventListener("message", (event) => {
        let message;
        try {
          message = JSON.parse(event.data);
        } catch (err) {
          return;
        }
        if (message.type === "subscribed") status("live", "live");
        else if (message.type === "update") onUpdate(message);
      });
      socket.addEventListener("close", (event) => {
        if (event.code === 4401) {
          status("closed", "logged out");
          return;
        }
        status("reconnecting", "reconnecting…");
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 15000);
      });
    }

    open();
    return { close: () => socket && socket.close() };
  }

  // The acting-master state of a group (state.actingMaster, dashboards/acting_master.py) as a badge,
  // the markup dashboards/templatetags/overview_rows.py acting_badge renders; null when there is none.
  function actingBadge(acting) {
    if (!acting) return null;
    const badge = document.createElement("span");
    badge.className = "warn acting";
    badge.dataset.agreement = acting.agreement;
    badge.dataset.brokerId = acting.brokerId === null || acting.brokerId === undefined ? "" : acting.brokerId;
    badge.textContent = acting.text;
    return badge;
  }

  // The health reasons that follow from the pushed state alone (dashboards/selectors.py _health):
  // "no master" (the only "bad" one; not while the routes show an acting master), the acting-master
  // state (its text always starts with "acting master") and a SyncStateSet smaller than the group. The
  // others (heartbeats, isolation, lag) stay as the page was rendered. badge: the health badge; list:
  // its <ul> of reasons.
  function applyHealth(badge, list, state, replicas) {
    if (!badge || !list) return;
    const reasons = [...list.children];
    const drop = (prefix) => reasons.filter((li) => li.textContent.startsWith(prefix)).forEach((li) => li.remove());
    const add = (text) => {
      const li = document.createElement("li");
      li.textContent = text;
      list.append(li);
    };
    const hasMaster = state.masterBrokerId !== null && state.masterBrokerId !== undefined;
    const acting = state.actingMaster || null;
    const standIn = acting !== null && acting.brokerId !== null && acting.brokerId !== undefined;
    drop("no master");
    drop("acting master");
    if (!hasMaster && !standIn) add("no master");
    if (acting) add(acting.text);
    const inSet = (state.syncStateSet || []).length;
    drop("SyncStateSet below");
    if (inSet && inSet < replicas) add(`SyncStateSet below the group's replicas (${inSet} of ${replicas})`);
    const texts = [...list.children].map((li) => li.textContent);
    const level = texts.some((t) => t === "no master") ? "bad" : texts.length ? "warn" : "ok";
    if (badge.textContent !== level) {
      badge.textContent = level;
      badge.className = `badge h-${level}`;
      flash(badge);
    }
    return level;
  }

  return { grouped, msTime, idSet, setText, flash, connect, actingBadge, applyHealth };
})();
