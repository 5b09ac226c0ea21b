// Book-wide script (registered in _config.yml: html_js_files, deferred).
// MathJax 3 does not break display formulas over lines: one wider than the content column
// is set smaller, down to 70 %, until it fits (else it scrolls, and the browser test flags it).
(function () {
  function fit() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (m) {
      if (!m.dataset.idlibFontPx) m.dataset.idlibFontPx = parseFloat(getComputedStyle(m).fontSize);
      var base = parseFloat(m.dataset.idlibFontPx);
      m.style.fontSize = base + "px";
      var ratio = m.clientWidth / m.scrollWidth;
      if (ratio < 1) m.style.fontSize = (base * Math.max(0.7, ratio * 0.98)) + "px";
    });
  }
  function start() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(function () { return document.fonts.ready; }).then(fit);
    }
    window.addEventListener("resize", fit);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
