// Session page: permalinks to turns on later pages, and embed codes.
(function () {
  var session = document.querySelector(".session");
  if (!session) return;

  // #turn-N for a turn on another page: ask the server which page holds it.
  var match = /^#turn-(\d+)$/.exec(location.hash);
  if (match && !document.getElementById("turn-" + match[1])) {
    location.replace(location.pathname + "?turn=" + match[1]);
    return;
  }

  var form = document.querySelector(".embed-form");
  var code = document.getElementById("embed-code");
  var status = document.querySelector(".copy-status");
  var panel = document.getElementById("embed-range");
  var title = document.querySelector(".session-head h1").textContent.trim();

  function iframe(from, to, theme) {
    var src = form.dataset.embedBase + "?from=" + from + "&to=" + to + (theme && theme !== "auto" ? "&theme=" + theme : "");
    var height = Math.min(900, 120 + 180 * (to - from + 1));
    var label = (title + " (Kernelbin)").replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
    return '<iframe src="' + src.replace(/&/g, "&amp;") + '" width="640" height="' + height + '" title="' + label + '" frameborder="0" loading="lazy"></iframe>';
  }

  function refresh() {
    var from = parseInt(form.elements.from.value, 10);
    var to = parseInt(form.elements.to.value, 10);
    if (!(from >= 1 && to >= from)) { code.value = "Choose a first turn and a last turn at or after it."; return; }
    code.value = iframe(from, to, form.elements.theme.value);
  }

  function copy(text) {
    var done = function () { if (status) { status.textContent = "Copied."; setTimeout(function () { status.textContent = ""; }, 2500); } };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { code.select(); });
    } else {
      code.select();
      try { document.execCommand("copy"); done(); } catch (e) { /* the text stays selected */ }
    }
  }

  if (form) {
    form.addEventListener("input", refresh);
    form.addEventListener("submit", function (event) { event.preventDefault(); });
    document.querySelector(".copy-code").addEventListener("click", function () { copy(code.value); });
  }

  document.querySelectorAll(".copy-embed").forEach(function (button) {
    button.addEventListener("click", function () {
      form.elements.from.value = button.dataset.from;
      form.elements.to.value = button.dataset.to;
      refresh();
      panel.open = true;
      copy(code.value);
      panel.scrollIntoView({ block: "nearest" });
    });
  });
})();
