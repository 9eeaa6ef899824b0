// Replay page: while the run is queued or running, ask the server until it is done,
// then show the finished page (rendered on the server, pictures included).
(function () {
  var page = document.querySelector(".replay");
  if (!page || page.dataset.state === "done") return;
  if (!document.querySelector(".running, .busy")) return;
  // Ask about the run this page shows; with none yet (every worker was busy), ask for one.
  var url = page.dataset.jsonUrl + (page.dataset.run ? "?run=" + page.dataset.run + "&" : "?");

  function poll(delay) {
    setTimeout(function () {
      fetch(url + "wait=3", { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (response) {
          if (response.status === 200) { location.reload(); return; }
          if (response.status === 503) {
            var retry = parseInt(response.headers.get("Retry-After") || "5", 10);
            poll(Math.max(1, retry) * 1000);
            return;
          }
          if (response.status === 202) { poll(250); return; }
          location.reload();
        })
        .catch(function () { poll(3000); });
    }, delay);
  }
  poll(0);
})();
