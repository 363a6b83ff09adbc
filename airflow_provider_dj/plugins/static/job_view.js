// The job view's few interactions: partition panel, failed-samples paging, tracer samples, "why".
// Read-only: every request is a GET to this plugin's own API (same origin, the UI's cookie).
(function () {
  "use strict";
  var api = document.body.dataset.api;
  if (!api) return;
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function get(path) {
    return fetch(api + path, { credentials: "same-origin", headers: { Accept: "application/json" } }).then(function (r) {
      return r.json().then(function (j) { if (!r.ok) throw new Error(j.detail || r.status); return j; });
    });
  }
  function table(cls, heads, rows) {
    var t = el("table", { class: cls }), tr = el("tr");
    heads.forEach(function (h) { tr.appendChild(el("th", {}, h)); });
    t.appendChild(tr);
    rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (c) { row.appendChild(el("td", {}, c)); });
      t.appendChild(row);
    });
    return t;
  }
  // -- failed samples, paged ----------------------------------------------------------
  var failedBox = document.getElementById("failed-samples");
  function loadFailed(partition, offset) {
    var q = "/failed?offset=" + offset + (partition !== "" && partition !== undefined ? "&partition=" + partition : "");
    return get(q).then(function (page) { renderFailed(failedBox, page, partition); });
  }
  function renderFailed(box, page, partition) {
    box.innerHTML = "";
    var scope = partition !== "" && partition !== undefined ? "partition " + partition : "all partitions";
    box.appendChild(el("p", { class: "muted" }, page.total + " failed sample(s) in " + scope +
      (page.total ? "; showing " + (page.offset + 1) + "-" + (page.offset + page.items.length) : "")));
    if (page.items.length) {
      box.appendChild(table("samples failed-table", ["input row", "partition", "op", "error", "sample"],
        page.items.map(function (s) {
          var err = String(s.error);
          if (s.error_type && err.indexOf(s.error_type) !== 0) err = s.error_type + ": " + err;
          return [s.input_row, s.partition_id, s.op_index + " " + s.op_name, err, s.text];
        })));
    }
    var nav = el("div", { class: "pager" });
    if (page.offset > 0) {
      var prev = el("button", { class: "prev" }, "← previous");
      prev.onclick = function () { loadFailed(partition, Math.max(0, page.offset - page.limit)); };
      nav.appendChild(prev);
    }
    if (page.offset + page.items.length < page.total) {
      var next = el("button", { class: "next" }, "next →");
      next.onclick = function () { loadFailed(partition, page.offset + page.limit); };
      nav.appendChild(next);
    }
    box.appendChild(nav);
  }
  loadFailed("", 0);
  // -- partition panel ------------------------------------------------------------------
  var panel = document.getElementById("partition");
  function openPartition(pid) {
    get("/partition/" + pid).then(function (d) {
      panel.hidden = false;
      document.getElementById("partition-title").textContent = d.label + (d.error ? " — failed" : "");
      var body = document.getElementById("partition-body");
      body.innerHTML = "";
      if (d.error) body.appendChild(el("p", { class: "err", id: "partition-error" }, d.error));
      body.appendChild(el("h3", {}, "Failed samples"));
      var fs = el("div", { id: "partition-failed" });
      body.appendChild(fs);
      renderFailed(fs, d.failed_samples, pid);
      body.appendChild(el("h3", {}, "Log (logs/partition_" + String(pid).padStart(5, "0") + ".log)"));
      body.appendChild(el("pre", { id: "partition-log" }, d.log.join("\n") || "(no log yet)"));
      body.appendChild(el("h3", {}, "Events"));
      body.appendChild(table("samples", ["time", "event", "op", "rows", "try", "task", "error"], d.events.map(function (e) {
        return [e.time_utc, e.event_type, e.op_index === undefined ? "" : e.op_index + " " + (e.op_name || ""),
          e.input_rows === undefined ? "" : e.input_rows + (e.output_rows === undefined ? "" : " → " + e.output_rows),
          e.try_number, (e.airflow_task_id || "") + (e.airflow_map_index === undefined ? "" : "[" + e.airflow_map_index + "]"),
          e.error_message || ""];
      })));
      panel.scrollIntoView();
    }).catch(function (e) { alert("could not load partition " + pid + ": " + e.message); });
  }
  document.querySelectorAll(".open-partition, td.cell").forEach(function (a) {
    a.addEventListener("click", function (ev) { ev.preventDefault(); openPartition(a.dataset.pid); });
  });
  var only = document.getElementById("only-problems");
  if (only) only.addEventListener("change", function () {
    document.querySelectorAll("#partition-grid tbody tr").forEach(function (tr) {
      tr.classList.toggle("hidden", only.checked && !tr.classList.contains("problem"));
    });
  });
  // A running job's page refreshes itself every 20 s (not while a panel or a look-up is open).
  if (["running", "stopping"].indexOf(document.body.dataset.status) >= 0) {
    setInterval(function () {
      if (panel.hidden && !document.getElementById("why-result").textContent) location.reload();
    }, 20000);
  }
  var focus = document.body.dataset.focus;
  if (focus) openPartition(focus.split(",")[0]);
  // -- why ------------------------------------------------------------------------------
  var form = document.getElementById("why-form");
  if (form) form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var row = document.getElementById("why-row").value, out = document.getElementById("why-result");
    out.textContent = "looking up row " + row + "…";
    get("/why?row=" + encodeURIComponent(row)).then(function (w) {
      out.innerHTML = "";
      var p = el("p");
      p.appendChild(el("span", { class: "fate" }, "row " + w.input_row + ": " + w.fate));
      p.appendChild(document.createTextNode(
        (w.op_name ? " by op " + w.op_index + " " + w.op_name : "") + " in " + w.partition_label + ". " + (w.reason || "")));
      out.appendChild(p);
      // A removed row's images, scaled down by the plugin (it opens only files the job's rows name).
      if (w.thumbnails && w.thumbnails.length) {
        var thumbs = el("div", { class: "thumbs" });
        w.thumbnails.forEach(function (t) {
          var fig = el("figure");
          fig.appendChild(el("img", { src: api + t.path, alt: t.name, title: t.name, loading: "lazy" }));
          fig.appendChild(el("figcaption", {}, t.name));
          thumbs.appendChild(fig);
        });
        out.appendChild(thumbs);
      }
      if (w.sample) out.appendChild(el("pre", {}, JSON.stringify(w.sample, null, 2)));
      if (w.source) out.appendChild(el("p", { class: "muted" }, "source: " + w.source));
    }).catch(function (e) { out.textContent = "look-up failed: " + e.message; });
  });
  // -- tracer ---------------------------------------------------------------------------
  document.querySelectorAll(".trace-op").forEach(function (b) {
    b.addEventListener("click", function () {
      get("/trace/" + b.dataset.op).then(function (t) {
        var box = document.getElementById("trace-samples");
        box.innerHTML = "";
        box.appendChild(el("p", { class: "muted" }, t.file + ": " + t.entries.length + " entries"));
        box.appendChild(el("pre", {}, t.entries.map(function (e) { return JSON.stringify(e); }).join("\n")));
      });
    });
  });
})();
