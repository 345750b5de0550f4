"use strict";
// The report page's script (agentd/app/batch_report.py embeds it and allows it by
// hash). Every text of the data is untrusted: it is set with textContent, never as
// markup; class names come from fixed lists only.
(function () {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const DASH = "—";
  const STATUSES = ["completed", "failed", "error", "interrupted", "budget_exhausted",
                    "deadline", "cancelled"];

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function fmt(n, digits) {
    if (n === null || n === undefined) return DASH;
    if (digits !== undefined) return Number(n).toFixed(digits);
    return Number(n).toLocaleString("en-US");
  }
  function ms(n) { return n === null || n === undefined ? DASH : (n / 1000).toFixed(2) + " s"; }
  function statusClass(s) { return STATUSES.indexOf(s) >= 0 ? "chip st-" + s : "chip"; }
  function scoreText(score) {
    if (!score) return DASH;
    const names = Object.keys(score);
    if (names.length === 1) return fmt(score[names[0]], 3);
    return names.map(function (k) { return k + "=" + fmt(score[k], 3); }).join(" ");
  }
  function firstScore(s) {
    if (!s.score) return null;
    const names = Object.keys(s.score);
    return names.length ? s.score[names[0]] : null;
  }

  // the header, the problems, the summary
  document.getElementById("source").textContent =
    data.source + " · " + data.samples.length + " samples · written " + data.generated;
  if (data.problems.length) {
    const ul = document.getElementById("problems");
    ul.hidden = false;
    ul.appendChild(el("li", null, data.problems.length + " line(s) not reported:"));
    data.problems.forEach(function (p) { ul.appendChild(el("li", null, p)); });
  }
  const sum = data.summary;
  function card(k, v) {
    const c = el("div", "card");
    c.appendChild(el("div", "k", k));
    if (v instanceof Node) c.appendChild(v); else c.appendChild(el("div", "v", v));
    document.getElementById("summary").appendChild(c);
  }
  card("samples", fmt(sum.samples));
  const chips = el("div", "v");
  sum.by_status.forEach(function (pair) {
    chips.appendChild(el("span", statusClass(pair[0]), pair[0] + " " + pair[1]));
  });
  card("by status", chips);
  sum.scores.forEach(function (s) {
    card("score " + s.name + " (n=" + s.n + ")", fmt(s.mean, 3) + " ± " + fmt(s.stderr, 3));
  });
  card("tokens", fmt(sum.tokens));
  card("prompt / completion", fmt(sum.prompt_tokens) + " / " + fmt(sum.completion_tokens));
  card("wall p50 / p95", ms(sum.wall_p50_ms) + " / " + ms(sum.wall_p95_ms));
  if (sum.pass_at.length) {
    const t = el("table");
    const hr = el("tr");
    ["score", "k", "tasks", "pass@k", "pass^k"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
    t.appendChild(hr);
    sum.pass_at.forEach(function (r) {
      const tr = el("tr");
      [r.name, r.k, r.tasks, fmt(r.pass_at_k, 3), fmt(r.pass_hat_k, 3)].forEach(function (v) {
        tr.appendChild(el("td", typeof v === "string" && v === r.name ? null : "num", v));
      });
      t.appendChild(tr);
    });
    const box = document.getElementById("passat");
    box.appendChild(el("h2", null, "pass@k over epochs"));
    box.appendChild(t);
  }

  // the table: columns, sorting, filtering
  const COLUMNS = [
    {key: "id", label: "id", value: function (s) { return s.id; }},
    {key: "status", label: "status", value: function (s) { return s.status; }},
    {key: "score", label: "score", num: true, value: firstScore, text: function (s) { return scoreText(s.score); }},
    {key: "epoch", label: "epoch", num: true, value: function (s) { return s.epoch; }},
    {key: "steps", label: "steps", num: true, value: function (s) { return s.steps; }},
    {key: "tokens", label: "tokens", num: true, value: function (s) { return s.tokens; }},
    {key: "wall", label: "wall", num: true, value: function (s) { return s.wall_ms; }, text: function (s) { return ms(s.wall_ms); }},
    {key: "model", label: "model", value: function (s) { return s.model; }},
    {key: "contract", label: "contract", value: function (s) { return s.contract_met === null ? null : (s.contract_met ? "met" : "broken"); }},
    {key: "error", label: "error", value: function (s) { return s.error; }},
  ];
  let sortKey = null, sortDir = 1, openId = null;
  const thead = document.querySelector("#samples thead tr");
  COLUMNS.forEach(function (col) {
    const th = el("th");
    th.dataset.key = col.key;
    const b = el("button", null, col.label);
    b.addEventListener("click", function () {
      sortDir = sortKey === col.key ? -sortDir : 1;
      sortKey = col.key;
      draw();
    });
    th.appendChild(b);
    thead.appendChild(th);
  });
  const select = document.getElementById("status");
  const present = sum.by_status.map(function (p) { return p[0]; });
  [["", "all statuses"], ["!completed", "not completed"]].concat(present.map(function (s) { return [s, s]; }))
    .forEach(function (o) { const opt = el("option", null, o[1]); opt.value = o[0]; select.appendChild(opt); });
  const filter = document.getElementById("filter");
  filter.addEventListener("input", draw);
  select.addEventListener("change", draw);

  function compare(col) {
    return function (a, b) {
      const x = col.value(a), y = col.value(b);
      if (x === null || x === undefined) return (y === null || y === undefined) ? 0 : 1;
      if (y === null || y === undefined) return -1;  // absent values last, either way
      if (col.num) return (x - y) * sortDir;
      return String(x).localeCompare(String(y)) * sortDir;
    };
  }
  function shownSamples() {
    const q = filter.value.toLowerCase(), st = select.value;
    let rows = data.samples.filter(function (s) {
      if (st === "!completed" && s.status === "completed") return false;
      if (st && st !== "!completed" && s.status !== st) return false;
      if (!q) return true;
      return [s.id, s.error, s.model, s.status].some(function (v) { return v && v.toLowerCase().indexOf(q) >= 0; });
    });
    if (sortKey) {
      const col = COLUMNS.filter(function (c) { return c.key === sortKey; })[0];
      rows = rows.slice().sort(compare(col));
    }
    return rows;
  }
  function draw() {
    thead.querySelectorAll("th").forEach(function (th) {
      if (th.dataset.key === sortKey) th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    });
    const rows = shownSamples();
    const tbody = document.querySelector("#samples tbody");
    const fresh = el("tbody");
    rows.forEach(function (s) {
      const tr = el("tr");
      tr.dataset.id = s.id;
      if (s.status === "error") tr.className = "errd";
      else if (s.status !== "completed") tr.className = "bad";
      if (s.id === openId) tr.classList.add("open");
      COLUMNS.forEach(function (col) {
        const v = col.text ? col.text(s) : col.value(s);
        const td = el("td", col.num ? "num" : (col.key === "error" ? "err" : null));
        if (col.key === "status") td.appendChild(el("span", statusClass(s.status), s.status));
        else td.textContent = v === null || v === undefined ? DASH : String(v);
        if (col.key === "error" && s.error) td.title = s.error;
        tr.appendChild(td);
      });
      tr.addEventListener("click", function () { open(s); });
      fresh.appendChild(tr);
    });
    tbody.replaceWith(fresh);
    document.getElementById("shown").textContent = rows.length + " of " + data.samples.length + " shown";
  }

  // one sample, its trajectory step by step, subagents nested
  function kv(dl, k, v) {
    dl.appendChild(el("dt", null, k));
    dl.appendChild(el("dd", null, v === null || v === undefined ? DASH : v));
  }
  function trajectory(t, box) {
    const head = el("div", "sub", [t.agent || "agent " + DASH, t.model ? "model " + t.model : null,
      t.session ? "session " + t.session : null, t.schema ? t.schema : null]
      .filter(function (x) { return x; }).join(" · "));
    box.appendChild(head);
    t.steps.forEach(function (st) {
      const div = el("div", "step src-" + (["user", "agent", "system"].indexOf(st.source) >= 0 ? st.source : "other"));
      const h = el("div", "h", "#" + (st.id === null ? DASH : st.id) + " " + st.source + " ");
      const tok = st.prompt_tokens !== null || st.completion_tokens !== null
        ? " · " + fmt(st.prompt_tokens) + " prompt + " + fmt(st.completion_tokens) + " completion tokens" : "";
      h.appendChild(el("span", "sub", (st.time || "") + tok));
      div.appendChild(h);
      if (st.message !== null && st.message !== "") div.appendChild(el("pre", "msg", st.message));
      st.calls.forEach(function (c) {
        const cd = el("div", "call");
        cd.appendChild(el("span", "name", "→ " + c.name + (c.id ? " (" + c.id + ")" : "")));
        cd.appendChild(el("pre", "args", c.arguments));
        div.appendChild(cd);
      });
      st.results.forEach(function (r) {
        const rd = el("div", "obs");
        rd.appendChild(el("span", "sub", "← observation" + (r.call ? " of " + r.call : "")));
        rd.appendChild(el("pre", null, r.content));
        div.appendChild(rd);
      });
      box.appendChild(div);
    });
    t.subagents.forEach(function (sub, i) {
      const d = el("details", "subagent");
      d.open = true;
      d.appendChild(el("summary", null, "subagent " + (i + 1) + (sub.agent ? ": " + sub.agent : "") +
        " (" + sub.steps.length + " steps)"));
      trajectory(sub, d);
      box.appendChild(d);
    });
    t.notes.forEach(function (n) { box.appendChild(el("div", "note", n)); });
    if (t.final) { box.appendChild(el("div", "sub", "final metrics")); box.appendChild(el("pre", null, t.final)); }
  }
  function open(s) {
    openId = s.id;
    const box = document.getElementById("detail");
    box.replaceChildren();
    box.hidden = false;
    box.appendChild(el("h2", null, "Sample " + s.id));
    const dl = el("dl", "kv");
    kv(dl, "status", s.status + (s.partial ? " (partial)" : ""));
    kv(dl, "score", scoreText(s.score));
    kv(dl, "epoch", s.epoch);
    kv(dl, "steps", s.steps);
    kv(dl, "tokens", fmt(s.tokens) + " (" + fmt(s.prompt_tokens) + " prompt, " + fmt(s.completion_tokens) + " completion)");
    kv(dl, "wall", ms(s.wall_ms));
    kv(dl, "model", s.model);
    kv(dl, "contract", s.contract_met === null ? null : (s.contract_met ? "met" : "broken"));
    kv(dl, "run", s.run_id);
    box.appendChild(dl);
    if (s.error) { box.appendChild(el("h3", null, "error")); box.appendChild(el("pre", "error", s.error)); }
    if (s.result !== null) { box.appendChild(el("h3", null, "result")); box.appendChild(el("pre", "result", s.result)); }
    if (s.metadata !== null) { box.appendChild(el("h3", null, "metadata")); box.appendChild(el("pre", null, s.metadata)); }
    const tr = el("div", "trajectory");
    box.appendChild(el("h3", null, "trajectory"));
    if (s.trajectory) trajectory(s.trajectory, tr);
    else tr.appendChild(el("div", "note", s.note || "no trajectory (agentd batch report --trajectories DIR)"));
    box.appendChild(tr);
    document.querySelectorAll("#samples tbody tr").forEach(function (row) {
      row.classList.toggle("open", row.dataset.id === s.id);
    });
    try { history.replaceState(null, "", "#" + encodeURIComponent(s.id)); } catch (e) { /* a file: URL may refuse it */ }
    box.scrollIntoView();
  }

  draw();
  if (location.hash.length > 1) {
    let want = null;
    try { want = decodeURIComponent(location.hash.slice(1)); } catch (e) { want = null; }
    const hit = data.samples.filter(function (s) { return s.id === want; })[0];
    if (hit) open(hit);
  }
})();
