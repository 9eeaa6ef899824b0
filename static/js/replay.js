// Replay and fork pages: while the run is queued or running, ask the server how it goes
// and say so in place; once it is done, fetch the page again and swap in the parts that
// show the outcome (rendered on the server, pictures included), without reloading.
(function () {
  // The code to embed this replay or fork, in the theme the blogger picks.
  document.querySelectorAll("select.embed-theme").forEach(function (select) {
    var box = document.getElementById(select.dataset.code);
    var light = box.value;
    select.addEventListener("change", function () {
      var theme = select.value === "light" ? "" : "?theme=" + select.value;
      box.value = light.replace(/\/embed\/"/g, "/embed/" + theme + '"');
    });
  });
})();

(function () {
  var page = document.querySelector(".replay");
  if (!page || page.dataset.state === "done") return;
  if (!document.querySelector(".running, .busy")) return;
  // Ask about the run this page shows; with none yet (every worker was busy), ask for one.
  var url = page.dataset.jsonUrl + (page.dataset.run ? "?run=" + page.dataset.run + "&" : "?");
  var started = Date.now();
  var STATES = { queued: "Waiting for a free replay worker…", running: "Running this kernel on the server…" };

  function progress(state) {
    var shown = document.querySelector(".run-progress");
    if (!shown) return;
    var seconds = Math.round((Date.now() - started) / 1000);
    shown.textContent = (STATES[state] || STATES.running) + (seconds ? " " + seconds + " s" : "");
  }

  function swapIn() {
    fetch(location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error(response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var parts = document.querySelectorAll("[data-live]");
        parts.forEach(function (old) {
          var next = fresh.querySelector('[data-live="' + old.dataset.live + '"]');
          if (next) old.replaceWith(document.importNode(next, true));
        });
        // The editors stay (with what the reader typed); the run's errors mark them.
        document.querySelectorAll("textarea[data-marks]").forEach(function (area) {
          var next = area.id && fresh.getElementById(area.id);
          if (!next) return;
          area.dataset.marks = next.dataset.marks || "[]";
          var marks = JSON.parse(area.dataset.marks);
          area.dispatchEvent(new CustomEvent("kernelbin:marks", { detail: marks }));
        });
        var article = fresh.querySelector(".replay");
        if (article) page.dataset.state = article.dataset.state;
        if (page.dataset.state !== "done") poll(1000);
      })
      .catch(function () { location.reload(); });
  }

  function poll(delay) {
    setTimeout(function () {
      fetch(url + "wait=3", { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (response) {
          if (response.status === 200) { swapIn(); return; }
          if (response.status === 503) {
            var retry = parseInt(response.headers.get("Retry-After") || "5", 10);
            poll(Math.max(1, retry) * 1000);
            return;
          }
          if (response.status === 202) {
            response.json().then(function (body) { progress(body.state); }, function () {});
            poll(250);
            return;
          }
          location.reload();
        })
        .catch(function () { poll(3000); });
    }, delay);
  }
  poll(0);
})();

// The passes shown in place: the pass stepper (a pass link, or the arrow keys on the pass
// list, shows that pass's buffers, fetched as the page at ?pass=N; without this script the
// links load it), and a buffer being kept whole (its version running again,
// pages/whole_buffer_views.py), fetched again every 2 s until it shows kept or why it was
// not (two minutes at most; then the page says to reload).
(function () {
  // The passes of the page at path (with its query) swapped in for those shown.
  function swapPasses(path) {
    return fetch(path, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error(response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var next = fresh.querySelector('[data-live="passes"]');
        var old = document.querySelector('[data-live="passes"]');
        if (!next || !old) throw new Error("no passes");
        old.replaceWith(document.importNode(next, true));
      });
  }

  function show(link) {
    var rel = link.getAttribute("rel");
    var url = new URL(link.href, location.href);
    swapPasses(url.pathname + url.search)
      .then(function () {
        history.replaceState(null, "", url.search + "#passes");
        var again = (rel && document.querySelector('.pass-steps a[rel="' + rel + '"]')) ||
          document.querySelector(".pass-steps [aria-current]");
        if (again) again.focus();
      })
      .catch(function () { location.href = link.href; });
  }
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest(".pass-steps a[data-pass]");
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button) return;
    event.preventDefault();
    show(link);
  });
  document.addEventListener("keydown", function (event) {
    if (!event.target.closest || !event.target.closest(".pass-steps")) return;
    var rel = event.key === "ArrowLeft" ? "prev" : event.key === "ArrowRight" ? "next" : "";
    var link = rel && document.querySelector('.pass-steps a[rel="' + rel + '"]');
    if (!link) return;
    event.preventDefault();
    show(link);
  });

  var tries = 0;
  function whileKept() {
    if (!document.querySelector(".whole-buffer [data-pending]") || ++tries > 60) return;
    setTimeout(function () {
      swapPasses(location.pathname + location.search).then(whileKept, whileKept);
    }, 2000);
  }
  whileKept();
})();
