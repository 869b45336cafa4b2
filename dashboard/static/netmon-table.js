// netmon's tables (dashboard/tables.py): netmonTable(id) builds the table of the element
// #netmon-table-ID from its data (#netmon-table-data-ID: columns, rows, each column's format,
// the total row count), with a header row that sorts on a click (again: the other way; empty
// cells last), and marks the element data-drawn="1". Cells are text (textContent): nothing in the
// data is read as HTML. dashboard/tables.py inlines this file in each table's HTML; the first
// table of a tab defines the function. No "<" followed by a letter or "/" anywhere in the code:
// Streamlit's sanitizer (DOMPurify) drops a script whose text has one.
(function () {
  "use strict";
  if (window.netmonTable) return;
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  function timeText(ms) {
    const d = new Date(ms);
    const day = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
    const text = `${day} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
    return d.getUTCMilliseconds() ? `${text}.${pad(d.getUTCMilliseconds(), 3)}` : text;
  }
  function cell(v, format) {
    if (v === null || v === undefined) return "–";
    if (format === "time") return timeText(v);
    if (format === "percent") return `${(v * 100).toFixed(1)}%`;
    if (typeof v === "number") return v.toLocaleString("en-US", { maximumFractionDigits: 3 });
    return String(v);
  }
  function order(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1; // empty cells last, either way
    if (b === null || b === undefined) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    const [x, y] = [String(a), String(b)]; // code points, as Python sorts: IPs and names alike
    return x < y ? -1 : x > y ? 1 : 0;
  }
  window.netmonTable = function (id) {
    const box = document.getElementById(`netmon-table-${id}`);
    const source = document.getElementById(`netmon-table-data-${id}`);
    if (!box || !source || box.dataset.drawn === "1") return;
    const spec = JSON.parse(source.textContent);
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    const body = table.createTBody();
    let sorted = { col: -1, way: 1 };
    const fill = (rows) => {
      body.replaceChildren(
        ...rows.map((row) => {
          const tr = document.createElement("tr");
          row.forEach((v, i) => {
            const td = tr.insertCell();
            td.textContent = cell(v, spec.formats[i]);
            if (typeof v === "number") td.className = "num";
          });
          return tr;
        })
      );
    };
    spec.columns.forEach((name, i) => {
      const th = document.createElement("th");
      th.textContent = name;
      if (spec.rows.some((row) => typeof row[i] === "number")) th.className = "num";
      th.title = "sort";
      th.addEventListener("click", () => {
        sorted = { col: i, way: sorted.col === i ? -sorted.way : 1 };
        for (const other of head.cells) other.dataset.sorted = "";
        th.dataset.sorted = sorted.way > 0 ? "up" : "down";
        fill(
          spec.rows
            .slice()
            .sort((a, b) =>
              a[i] === null || b[i] === null ? order(a[i], b[i]) : sorted.way * order(a[i], b[i])
            )
        );
      });
      head.appendChild(th);
    });
    fill(spec.rows);
    box.querySelector(".netmon-table-scroll").appendChild(table);
    if (spec.total > spec.rows.length) {
      const note = box.querySelector(".netmon-table-note");
      note.textContent = `the first ${spec.rows.length.toLocaleString("en-US")} of ${spec.total.toLocaleString("en-US")} rows`;
    }
    box.dataset.drawn = "1";
  };
})();
