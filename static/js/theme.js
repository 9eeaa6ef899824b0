// Runs in <head> so the stored theme applies before the first paint.
(function () {
  var root = document.documentElement;
  var stored = null;
  try { stored = localStorage.getItem("kernelbin-theme"); } catch (e) { /* storage may be blocked */ }
  if (stored === "light" || stored === "dark") root.setAttribute("data-theme", stored);

  function effective() {
    var theme = root.getAttribute("data-theme");
    if (theme === "light" || theme === "dark") return theme;
    return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }

  document.addEventListener("DOMContentLoaded", function () {
    // A code block wider than its column scrolls: the keyboard must reach it too.
    document.querySelectorAll("pre").forEach(function (block) {
      if (block.scrollWidth > block.clientWidth || block.scrollHeight > block.clientHeight) {
        block.setAttribute("tabindex", "0");
      }
    });
    document.querySelectorAll("[data-theme-toggle]").forEach(function (button) {
      button.addEventListener("click", function () {
        var next = effective() === "dark" ? "light" : "dark";
        root.setAttribute("data-theme", next);
        try { localStorage.setItem("kernelbin-theme", next); } catch (e) { /* not remembered */ }
      });
    });
  });
})();
