// hetflow dashboard: renders the JSON the coordinator serves and follows its
// server-sent events. No framework, no build step.
"use strict";
(function () {
  const $ = (s) => document.querySelector(s);
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const fmtAge = (ms) => {
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  };
  const pill = (st) => `<span class="state st-${esc(st)}">${esc(st)}</span>`;
  const bar = (p, failed) => `<span class="pbar${failed ? " fail" : ""}"><i style="width:${(100 * p).toFixed(1)}%"></i></span><span class="pct">${Math.round(100 * p)}%</span>`;
  const workers = (n, busy, gpu) => {
    if (!n) return "–";
    const k = Math.round(busy * n);
    let h = '<span class="workers">';
    for (let i = 0; i < n; i++) h += `<i class="${gpu ? "gpu " : ""}${i < k ? "busy" : ""}"></i>`;
    return h + `</span><span class="pct">${n} · ${Math.round(100 * busy)}% busy</span>`;
  };
  // tally names every state a run's tasks are in, so the counts add up to
  // the progress figure (done and skipped tasks of all).
  const tally = (c) => {
    const parts = ["done", "running", "failed", "pending", "skipped", "cancelled"].filter((k) => c[k] > 0).map((k) => `${c[k]} ${k}`);
    return parts.length ? parts.join(" · ") : `${c.tasks || 0} tasks`;
  };
  const live = (on, text) => { const l = $("#live"); if (l) { l.textContent = text; l.classList.toggle("on", on); } };

  // follow opens an event stream, calling fn for each named event; it
  // reconnects (EventSource does) and shows the connection state.
  function follow(url, name, fn, onEnd) {
    const es = new EventSource(url);
    // Connections opened, for the browser test: a stream that flushes stays
    // one connection; one that did not would reconnect after every event.
    es.addEventListener("open", () => { window.hetflowStreamOpens = (window.hetflowStreamOpens || 0) + 1; live(true, "live"); });
    es.addEventListener(name, (e) => { live(true, "live"); fn(JSON.parse(e.data)); });
    es.addEventListener("end", () => { es.close(); live(false, "finished"); if (onEnd) onEnd(); });
    es.addEventListener("error", (e) => {
      if (e.data) { live(false, JSON.parse(e.data).error); es.close(); return; }
      if (es.readyState !== EventSource.OPEN) live(false, "reconnecting…");
    });
    return es;
  }

  function cancel(id, btn) {
    if (!confirm("Cancel run " + id + "?")) return;
    btn.disabled = true;
    fetch(`/ui/runs/${encodeURIComponent(id)}/cancel`, {method: "POST", headers: {"X-Hetflow-UI": "1"}, credentials: "same-origin"})
      .then((r) => r.ok ? r.json() : r.json().then((j) => Promise.reject(new Error(j.error || r.statusText))))
      .catch((e) => { alert("cancel: " + e.message); btn.disabled = false; });
  }

  // ---- overview ----
  function renderOverview(o) {
    $("#term").textContent = o.term;
    $("#tasks-sec").textContent = o.tasks_per_sec.toFixed(1);
    $("#msgs-sec").textContent = o.messages_per_sec.toFixed(1);
    $("#coordinators tbody").innerHTML = (o.coordinators || []).map((c) =>
      `<tr data-id="${esc(c.id)}"><td>${esc(c.id)}</td><td>${c.leader ? "<b>leader</b>" : esc(c.suffrage)}</td><td>${pill(c.state || "unknown")}</td><td>${esc(c.raft)}</td><td>${esc(c.http)}</td></tr>`).join("");
    $("#nodes tbody").innerHTML = (o.nodes || []).map((n) =>
      `<tr data-id="${esc(n.id)}" data-state="${esc(n.state)}"><td>${esc(n.id)}</td><td>${pill(n.state)}</td><td>${esc(n.address)}</td><td>${workers(n.cpus, n.cpu_busy, false)}</td><td>${workers(n.gpus, n.gpu_busy, true)}</td><td>${n.running}</td><td>${n.tasks_per_sec.toFixed(1)}</td></tr>`).join("");
    $("#runs tbody").innerHTML = (o.runs || []).map((r) =>
      `<tr class="run" data-id="${esc(r.id)}" data-state="${esc(r.state)}"><td><a href="/ui/runs/${encodeURIComponent(r.id)}">${esc(r.id)}</a></td><td>${esc(r.flow)}</td><td>${pill(r.state)}</td><td>${fmtAge(r.age_ms)}</td>` +
      `<td>${r.tasks ? bar(r.progress, r.failed > 0) + ` <span class="pct" title="${esc(tally(r))}">${r.done + (r.skipped || 0)}/${r.tasks}</span>` : ""}</td>` +
      `<td>${r.state === "running" || r.state === "pending" ? `<button class="cancel" data-run="${esc(r.id)}">cancel</button>` : ""}</td></tr>`).join("");
    document.querySelectorAll("#runs button.cancel").forEach((b) => b.addEventListener("click", () => cancel(b.dataset.run, b)));
  }

  // ---- run ----
  function runPage() {
    const id = decodeURIComponent(location.pathname.split("/").pop());
    const base = `/ui/runs/${encodeURIComponent(id)}`;
    $("#run-id").textContent = id;
    $("#trace").href = base + "/trace.json";
    $("#cancel").addEventListener("click", (e) => cancel(id, e.target));
    // The server drew the first view (graph, timeline, counts); the
    // crumbs come from the graph's data, here and after every redraw.
    function crumbs(svg) {
      if (!svg || !svg.dataset.crumbs) return;
      const cs = JSON.parse(svg.dataset.crumbs);
      $("#crumbs").innerHTML = cs.map((c, i) => i === cs.length - 1 ? `<b>${esc(c.label)}</b>` : `<a href="${base}${c.query ? "?" + esc(c.query) : ""}">${esc(c.label)}</a>`).join("<span>›</span>");
    }
    crumbs($("#graph svg"));
    let busy = false, again = false;
    async function load(url, el) {
      const r = await fetch(url, {credentials: "same-origin", cache: "no-store"});
      const t = await r.text();
      if (!r.ok) { el.innerHTML = `<p class="error">${esc(t)}</p>`; return null; }
      el.innerHTML = t;
      return el.querySelector("svg");
    }
    async function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      try {
        crumbs(await load(base + "/graph.svg" + location.search, $("#graph")));
        await load(base + "/timeline.svg", $("#timeline"));
      } catch (e) { live(false, String(e)); }
      busy = false;
      if (again) { again = false; refresh(); }
    }
    function render(s) {
      document.title = `hetflow: ${s.flow} ${s.state}`;
      $("#flow").textContent = s.flow;
      const st = $("#state"); st.textContent = s.state; st.className = `state st-${s.state}`;
      document.body.dataset.state = s.state;
      $("#progress").textContent = Math.round(100 * s.progress) + "%";
      $("#counts").textContent = tally(s);
      $("#age").textContent = fmtAge(s.age_ms);
      $("#gen").textContent = s.gen;
      $("#cancel").hidden = !(s.state === "running" || s.state === "pending");
      const er = $("#error"); er.hidden = !s.error; er.textContent = s.error || "";
      const ps = Object.keys(s.params || {}).sort();
      const pe = $("#params"); pe.hidden = ps.length === 0;
      pe.textContent = ps.length ? "params: " + ps.map((k) => `${k}=${JSON.stringify(s.params[k])}`).join("  ") : "";
      refresh();
    }
    follow(base + "/events", "summary", render, refresh);
  }

  const page = document.body.dataset.page;
  if (page === "overview") {
    fetch("/ui/overview.json", {credentials: "same-origin"}).then((r) => r.json()).then(renderOverview).catch(() => {});
    follow("/ui/events", "overview", renderOverview);
  } else if (page === "run") {
    runPage();
  }
})();
