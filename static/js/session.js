// Session page: permalinks to turns on other pages, jumps (next kernel, next failing run),
// j / k between turns, the outline's current lesson, and embed codes.
(function () {
  var session = document.querySelector(".session");
  if (!session) return;
  var root = document.documentElement;
  var bar = session.querySelector(".turn-tools");

  function turnUrl(number) {
    return location.pathname + "?turn=" + number + "#turn-" + number;
  }

  // #turn-N for a turn on another page: ask the server for the page that holds it.
  var match = /^#turn-(\d+)$/.exec(location.hash);
  if (match && !document.getElementById("turn-" + match[1])) {
    location.replace(turnUrl(match[1]));
    return;
  }

  // Anchors land below the sticky bar, however many lines it wraps to.
  function measureBar() {
    if (bar) root.style.setProperty("--turn-tools-height", bar.offsetHeight + "px");
  }
  measureBar();
  window.addEventListener("resize", measureBar);

  var turns = Array.prototype.slice.call(session.querySelectorAll(".turns > .turn"));
  function numberOf(turn) { return parseInt(turn.id.slice(5), 10); }

  function show(number, push) {
    var turn = document.getElementById("turn-" + number);
    if (!turn) { location.assign(turnUrl(number)); return; }
    history[push ? "pushState" : "replaceState"](null, "", turnUrl(number));
    // A sub-agent's turn is folded under its call: open the folds that hold it.
    for (var fold = turn.parentElement.closest("details"); fold; fold = fold.parentElement.closest("details")) fold.open = true;
    turns.forEach(function (other) { other.classList.toggle("is-target", other === turn); });
    turn.scrollIntoView({ block: "start" });
    turn.setAttribute("tabindex", "-1");
    turn.focus({ preventScroll: true });
  }

  // ?turn=N (a link without its #turn-N): scroll to it.
  var asked = /[?&]turn=(\d+)/.exec(location.search);
  if (asked && !location.hash && document.getElementById("turn-" + asked[1])) show(asked[1], false);

  // The turn being read: the last one whose top is at or above the bar's bottom edge (give
  // or take the margin a turn scrolled to keeps below the bar).
  function current() {
    var line = (bar ? bar.getBoundingClientRect().bottom : 0) + 24;
    var found = parseInt(session.dataset.pageFirst || "1", 10) - 1;
    turns.forEach(function (turn) { if (turn.getBoundingClientRect().top <= line) found = numberOf(turn); });
    return found;
  }

  session.querySelectorAll(".turn-number").forEach(function (link) {
    link.addEventListener("click", function (event) {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      show(numberOf(link.closest(".turn")), true);
    });
  });

  // Next kernel / next failing run: the first such turn after the one being read.
  var lists = {
    kernel: (session.dataset.kernelTurns || "").split(",").filter(Boolean).map(Number),
    failure: (session.dataset.failingTurns || "").split(",").filter(Boolean).map(Number),
  };
  session.querySelectorAll("[data-jump]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      var now = current();
      var next = lists[link.dataset.jump].filter(function (n) { return n > now; })[0];
      if (next === undefined) next = lists[link.dataset.jump][0]; // from the top again
      show(next, true);
    });
  });

  // j / k: the next and the previous turn; past either end of the page, the next page.
  document.addEventListener("keydown", function (event) {
    if (event.metaKey || event.ctrlKey || event.altKey || event.defaultPrevented) return;
    var target = event.target;
    if (target.closest && target.closest("input, textarea, select, button, [contenteditable]")) return;
    if (event.key !== "j" && event.key !== "k") return;
    var now = current();
    var index = turns.findIndex(function (turn) { return numberOf(turn) === now; });
    var step = event.key === "j" ? 1 : -1;
    var to = turns[index === -1 ? (step > 0 ? 0 : -1) : index + step];
    event.preventDefault();
    if (to) { show(numberOf(to), false); return; }
    var pager = session.querySelector(step > 0 ? ".pager .later" : ".pager .earlier");
    if (pager) location.assign(pager.href);
  });

  // The outline marks the lesson being read.
  var toc = Array.prototype.slice.call(session.querySelectorAll(".session-toc a[data-turn]"));
  function markSection() {
    var now = current();
    var mark = null;
    toc.forEach(function (link) { if (Number(link.dataset.turn) <= now) mark = link; });
    toc.forEach(function (link) {
      if (link === mark) link.setAttribute("aria-current", "true");
      else link.removeAttribute("aria-current");
    });
  }
  var pending = false;
  window.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; markSection(); });
  }, { passive: true });
  markSection();

  // Embed codes: the panel builds both codes for the range and theme chosen.
  var panel = document.getElementById("embed-panel");
  var form = panel && panel.querySelector(".embed-form");
  if (!form) return;
  var script = document.getElementById("embed-code");
  var iframe = document.getElementById("embed-iframe");
  var status = panel.querySelector(".copy-status");
  var heights = form.dataset.heights.split(",").map(Number);

  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function refresh() {
    var from = parseInt(form.elements.from.value, 10);
    var to = parseInt(form.elements.to.value, 10);
    if (!(from >= 1 && to >= from)) {
      script.value = iframe.value = "Choose a first turn and a last turn at or after it.";
      return;
    }
    var theme = form.elements.theme.value;
    var src = form.dataset.embedBase + "?from=" + from + "&to=" + to + (theme !== "light" ? "&theme=" + theme : "");
    var title = form.dataset.title + (from === to ? " · turn " + from : " · turns " + from + "–" + to);
    var height = Math.min(heights[2], heights[0] + heights[1] * (to - from + 1));
    function fill(template) {
      return template.replace("{src}", escapeHtml(src)).replace("{title}", escapeHtml(title)).replace("{height}", height);
    }
    script.value = fill(form.dataset.script);
    iframe.value = fill(form.dataset.iframe);
    // The plain iframe's height is the turns' at the column's width: the server lays
    // the range out (oEmbed's answer, whose html starts with that iframe).
    var width = parseInt(form.elements.width.value, 10);
    if (!(width >= 200)) return;
    var asked = src + "|" + width;
    latest = asked;
    var query = "?format=json&maxwidth=" + width + "&url=" + encodeURIComponent(src);
    fetch(form.dataset.oembed + query, { headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (answer) {
        if (!answer || latest !== asked) return;
        var end = answer.html.indexOf("</iframe>");
        if (end > 0) iframe.value = answer.html.slice(0, end + "</iframe>".length);
      }, function () {});
  }
  var latest = "";

  function copy(box) {
    var done = function () {
      status.textContent = "Copied.";
      setTimeout(function () { status.textContent = ""; }, 2500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(box.value).then(done, function () { box.select(); });
    } else {
      box.select();
      try { document.execCommand("copy"); done(); } catch (e) { /* the text stays selected */ }
    }
  }

  form.addEventListener("input", refresh);
  // The page carries a first guess at the iframe's height; opened, the panel asks.
  panel.addEventListener("toggle", function () { if (panel.open) refresh(); });
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  panel.querySelectorAll(".copy-code").forEach(function (button) {
    button.addEventListener("click", function () { copy(document.getElementById(button.dataset.copyTarget)); });
  });

  // A turn's Embed button opens the panel right under that turn: nothing is covered.
  session.querySelectorAll(".copy-embed").forEach(function (button) {
    button.addEventListener("click", function () {
      form.elements.from.value = button.dataset.from;
      form.elements.to.value = button.dataset.to;
      refresh();
      button.closest(".turn").insertAdjacentElement("afterend", panel);
      panel.open = true;
      panel.scrollIntoView({ block: "nearest" });
      script.focus();
      copy(script);
    });
  });
})();
