// Audit of one rendered page of the book, evaluated by tests/browser/test_book.py after the
// page has loaded and MathJax has typeset it. Returns {check: [message, ...]} plus the images
// (their figure-text size is judged in Python, which reads each PNG's dpi).
() => {
  const art = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const out = {raw_table: [], raw_tex: [], unresolved: [], math: [], overflow: [], clipped_text: [],
               solution_visible: [], stderr: [], images: [], code_width: [], uncaptioned_table: [],
               parameters_visible: []};
  const vis = (el) => el && el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}) &&
                      el.getClientRects().length > 0;
  const short = (s, n = 90) => s.replace(/\s+/g, " ").trim().slice(0, n);
  // "where": the id of the nearest section above the element, so an author can find it.
  const where = (el) => {
    const sec = el.closest("section[id]");
    return sec ? "#" + sec.id : "(top)";
  };
  const desc = (el) => el.tagName.toLowerCase() + (el.className && typeof el.className === "string"
      ? "." + el.className.trim().split(/\s+/).slice(0, 3).join(".") : "");

  // ---- visible prose and output text (code inputs, code literals and typeset math excluded)
  const skip = (el) => el.closest(".cell_input, mjx-container, code, script, style, .headerlink, " +
                                  "nav, .prev-next-area, .bd-sidebar-primary, .bd-sidebar-secondary") ||
                       (el.closest('div[class*="highlight-"]') && !el.closest(".cell_output"));
  let text = "", prose = "";
  const owners = [], proseOwners = [];  // [offset, element]
  const walker = document.createTreeWalker(art, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || skip(el) || !vis(el)) continue;
    owners.push([text.length, el]);
    text += n.nodeValue + "\n";  // no match runs from one element into the next
    // prose: not outputs, and not the API reference's docstrings (plain text by the library's style)
    if (!el.closest(".cell_output, dl.py, section[id^='module-']")) { proseOwners.push([prose.length, el]); prose += n.nodeValue + "\n"; }
  }
  const ownerAt = (own, i) => {
    let lo = 0, hi = own.length - 1;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (own[mid][0] <= i) lo = mid; else hi = mid - 1; }
    return own.length ? own[lo][1] : art;
  };
  const scan = (re, key, label, onlyProse = false) => {
    const seen = new Set();
    const [src, own] = onlyProse ? [prose, proseOwners] : [text, owners];
    for (const m of src.matchAll(re)) {
      const el = ownerAt(own, m.index);
      const ctx = short(src.slice(Math.max(0, m.index - 40), m.index + 60));
      const msg = `${where(el)}: ${label} ${JSON.stringify(m[0])} in "${ctx}"`;
      if (!seen.has(msg)) { seen.add(msg); out[key].push(msg); }
    }
  };
  // (Sphinx's smartquotes turn a raw "|---|" into "|—|")
  scan(/\|\s*:?(?:-{2,}|[\u2013\u2014]+-*)\s*:?\|/g, "raw_table", "raw pipe-table text");
  scan(/\\\(|\\\)|\\\[|\\\]|\$\$|\\(?:frac|sigma|tau|theta|omega|gamma|alpha|beta|mu|mathrm|mathbb|mathcal|operatorname|begin|end|sum|cdot|times|leq?|geq?|top|left|right|sqrt|dim|ker|rank)(?![A-Za-z])/g,
       "raw_tex", "raw TeX");
  scan(/\$[^\s$\d][^$\n]{0,60}?\$/g, "raw_tex", "raw $-math");
  // math written as plain text in prose and captions (k^2, W_Q): it should be $k^2$, $W_Q$
  scan(/(?<![\w^\\])[A-Za-z]\^(?:[0-9]|\{|[A-Za-z](?![A-Za-z]))|(?<![\w\\])[A-Za-z]_(?:\{|[A-Za-z0-9](?![A-Za-z0-9_]))/g,
       "raw_tex", "math as plain text", true);
  // ... and Greek letters spelled out with an index (sigma_1, lambda^2), formulas in one-letter
  // function notation (G(m+1), f(x-1)) and one-letter ratios (u/P; not I/O)
  scan(/\b(?:alpha|beta|gamma|delta|epsilon|eps|kappa|lambda|mu|sigma|tau|theta|omega|rho|phi|pi)[_^][\w{]/g,
       "raw_tex", "math as plain text", true);
  scan(/(?<![\w\\])[A-Za-z]\((?:[a-z]\s*[-+*/]\s*[\w]+|[a-z],\s*[a-z])\)/g, "raw_tex", "math as plain text", true);
  scan(/(?<![\w/\\])(?:[a-z]\/[A-Za-z]|[A-Z]\/[a-z])(?![\w/])/g, "raw_tex", "math as plain text", true);
  scan(/\?\?/g, "unresolved", "unresolved reference");
  scan(/\{(?:cite|numref|ref|eq|doc|term|download|math|prf:[a-z]+)(?::[a-z]+)?\}`?|:(?:prf:ref|cite(?::p|:t)?|numref|ref|eq|doc):`/g,
       "unresolved", "unresolved role");

  // ---- mathematics: every formula typeset, no MathJax error
  const maths = [...art.querySelectorAll("span.math, div.math")];
  if (maths.length && (!window.MathJax || !window.MathJax.startup)) out.math.push("MathJax did not load (no window.MathJax)");
  const raw = maths.filter((m) => !m.querySelector("mjx-container"));
  if (raw.length) out.math.push(`${raw.length} of ${maths.length} formulas not typeset, first at ` +
                                `${where(raw[0])}: ${JSON.stringify(short(raw[0].textContent, 60))}`);
  for (const e of art.querySelectorAll("mjx-merror")) {
    out.math.push(`${where(e)}: MathJax error ${JSON.stringify(e.getAttribute("data-mjx-error") || short(e.textContent))}`);
  }

  // ---- nothing wider than the content column unless it sits in a horizontal scroll box
  const cs = getComputedStyle(art);
  const ar = art.getBoundingClientRect();
  const colLeft = ar.left + parseFloat(cs.paddingLeft), colRight = ar.right - parseFloat(cs.paddingRight);
  const flagged = [];
  const blocks = art.querySelectorAll("table, pre, img, svg, figure, .cell_output, .output, div.math, " +
                                      "mjx-container, .admonition, details, p, li, dl, blockquote, iframe, canvas");
  for (const el of blocks) {
    if (!vis(el) || flagged.some((f) => f.contains(el))) continue;
    if (el.closest("mjx-container") && el.tagName !== "MJX-CONTAINER") continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || (r.right <= colRight + 1 && r.left >= colLeft - 1)) continue;
    let ok = false;
    for (let a = el.parentElement; a && a !== art.parentElement; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if ((ox === "auto" || ox === "scroll") && a.getBoundingClientRect().right <= colRight + 1) { ok = true; break; }
      // clipped by a box that does not scroll: the reader cannot reach it
      if ((ox === "hidden" || ox === "clip") && r.right > a.getBoundingClientRect().right + 1) break;
    }
    if (ok) continue;
    flagged.push(el);
    out.overflow.push(`${where(el)}: ${desc(el)} spans ${Math.round(r.left - colLeft)}..${Math.round(r.right - colLeft)} px ` +
                      `of a ${Math.round(colRight - colLeft)} px column, no scroll box: "${short(el.textContent || el.getAttribute("src") || "", 70)}"`);
  }
  // printed results are read, not scrolled: no output line longer than its box
  for (const pre of art.querySelectorAll(".cell_output pre")) {
    if (!vis(pre) || pre.scrollWidth <= pre.clientWidth + 1) continue;
    const long = pre.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a), "");
    out.clipped_text.push(`${where(pre)}: printed output ${pre.scrollWidth} px wide in a ${pre.clientWidth} px box ` +
                          `(scrolls or is cut): "${short(long, 80)}"`);
  }
  // display formulas too: one that scrolls shows the reader half an equation
  for (const m of art.querySelectorAll("div.math, mjx-container[display=\"true\"]")) {
    if (!vis(m) || m.scrollWidth <= m.clientWidth + 1) continue;
    out.clipped_text.push(`${where(m)}: display formula ${m.scrollWidth} px wide in a ${m.clientWidth} px column ` +
                          `(break it over lines, e.g. split/aligned): "${short(m.textContent, 80)}"`);
  }
  const sw = document.scrollingElement.scrollWidth;
  if (sw > window.innerWidth + 1) out.overflow.push(`the page scrolls sideways (${sw} px wide in a ${window.innerWidth} px window)`);

  // ---- code: no line of a code cell (or of a code block) wider than its box; one would have
  // to scroll sideways to read it. The message names the longest line and how many are too wide.
  const charWidth = (el) => {
    const c = document.createElement("canvas").getContext("2d");
    const f = getComputedStyle(el);
    c.font = `${f.fontStyle} ${f.fontWeight} ${f.fontSize} ${f.fontFamily}`;
    return c.measureText("0123456789").width / 10;
  };
  for (const pre of art.querySelectorAll(".cell_input pre, div[class*='highlight-'] pre")) {
    if (pre.closest(".cell_output") || !vis(pre) || pre.scrollWidth <= pre.clientWidth + 1) continue;
    const f = getComputedStyle(pre);
    const box = pre.clientWidth - parseFloat(f.paddingLeft) - parseFloat(f.paddingRight);
    const fits = Math.floor(box / charWidth(pre));
    const lines = pre.textContent.replace(/\n$/, "").split("\n");
    const wide = lines.filter((l) => l.length > fits);
    const long = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
    out.code_width.push(`${where(pre)}: code ${pre.scrollWidth} px wide in a ${pre.clientWidth} px box ` +
                        `(scrolls sideways): ${wide.length || 1} line(s) over the ${fits} characters ` +
                        `that fit, the longest ${long.length}: "${short(long, 80)}"`);
  }

  // ---- tables: in a chapter (every page under chapters/), each table carries a numbered
  // caption ("Table 4.2 ...": a MyST table directive or idlib.report.tables.captioned).
  out.tables = 0;
  if (/\/chapters\/[^/]+\.html$/.test(location.pathname)) {
    for (const t of art.querySelectorAll("table")) {
      if (t.closest("mjx-container")) continue;
      out.tables += 1;
      if (t.querySelector(":scope > caption .caption-number")) continue;
      const head = t.querySelector("tr");
      out.uncaptioned_table.push(`${where(t)}: table without a numbered caption (columns: ` +
                                 `"${short(head ? [...head.cells].map((c) => c.textContent.trim()).join(" | ") : t.textContent, 70)}")`);
    }
  }

  // ---- the parameters cell (papermill's): collapsed (tag hide-cell) or removed, never shown
  for (const c of art.querySelectorAll(".cell.tag_parameters")) {
    const inp = c.querySelector(".cell_input");
    if (inp && vis(inp)) {
      out.parameters_visible.push(`${where(c)}: the cell tagged parameters is shown (tag it hide-cell): ` +
                                  `"${short(inp.textContent, 70)}"`);
    }
  }

  // ---- exercises: nothing of a closed solution visible, no answer printed after one
  const solutions = art.querySelectorAll("details, .solution, .toggle");
  for (const s of solutions) {
    const title = s.querySelector(":scope > summary, :scope > .admonition-title, :scope > button, :scope > .toggle-button");
    const isSolution = s.matches(".solution") || /solution|answer/i.test(title ? title.textContent : "");
    if (!isSolution) continue;
    const closed = s.tagName === "DETAILS" ? !s.open : !!s.querySelector(".toggle-hidden") || s.classList.contains("toggle-hidden");
    if (!closed) continue;
    for (const c of s.querySelectorAll(".cell_output, pre, p, table, img, li, mjx-container")) {
      if (title && title.contains(c)) continue;
      if (c.closest(".admonition-title, summary, .toggle-button")) continue;
      if (vis(c) && c.getBoundingClientRect().height > 0) {
        out.solution_visible.push(`${where(s)}: closed solution shows ${desc(c)} "${short(c.textContent, 60)}"`);
        break;
      }
    }
    // an answer cell right after the closed solution (hidden input, visible output)
    let nxt = s.nextElementSibling;
    while (nxt && nxt.matches(".cell") && (nxt.matches(".tag_hide-input, .tag_remove-input") || !nxt.querySelector(".cell_input"))) {
      const o = nxt.querySelector(".cell_output");
      if (o && vis(o) && o.textContent.trim()) {
        out.solution_visible.push(`${where(s)}: the output of a hidden-input cell after a closed solution is visible: "${short(o.textContent, 70)}"`);
      }
      nxt = nxt.nextElementSibling;
    }
  }

  // ---- stderr and warnings in outputs
  for (const o of art.querySelectorAll(".cell_output .output.stderr, .cell_output .stderr")) {
    if (vis(o)) out.stderr.push(`${where(o)}: stderr output "${short(o.textContent, 90)}"`);
  }
  for (const o of art.querySelectorAll(".cell_output")) {
    const m = o.textContent.match(/\b\w*(Warning|Error)\b[:(]/);
    if (m && vis(o)) out.stderr.push(`${where(o)}: "${m[0]}" printed in an output: "${short(o.textContent.slice(Math.max(0, m.index - 20)), 90)}"`);
  }

  // ---- images, for the figure-text check in Python
  for (const img of art.querySelectorAll("img")) {
    if (!vis(img)) continue;
    const cell = img.closest(".cell");
    const src = cell ? cell.querySelector(".cell_input") : null;
    out.images.push({src: img.currentSrc || img.src, naturalWidth: img.naturalWidth,
                     width: img.getBoundingClientRect().width, where: where(img),
                     source: src ? src.textContent : "", complete: img.complete});
  }
  return out;
}
