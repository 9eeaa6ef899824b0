// Runs inside the embed iframe, which may be sandboxed (WordPress: allow-scripts only),
// so it uses nothing but postMessage: no cookies, no storage, no requests.
(function () {
  // WordPress appends #?secret=… and resizes iframes that answer with it.
  var secret = (/[#&?]secret=([A-Za-z0-9]+)/.exec(location.hash) || [])[1];
  var last = 0;

  function report() {
    var height = Math.ceil(document.documentElement.getBoundingClientRect().height);
    if (height === last || window.parent === window) return;
    last = height;
    window.parent.postMessage({ type: "kernelbin:embed-height", height: height, src: location.href }, "*");
    if (secret) window.parent.postMessage({ message: "height", value: height, secret: secret }, "*");
  }

  if (secret) {
    // A sandboxed frame cannot open links itself; WordPress opens them for it.
    document.addEventListener("click", function (event) {
      var link = event.target.closest && event.target.closest("a[href]");
      if (!link) return;
      event.preventDefault();
      window.parent.postMessage({ message: "link", value: link.href, secret: secret }, "*");
    });
  }

  // A code block wider than the frame scrolls: the keyboard must reach it too.
  document.querySelectorAll("pre").forEach(function (block) {
    if (block.scrollWidth > block.clientWidth) block.setAttribute("tabindex", "0");
  });

  if (window.ResizeObserver) new ResizeObserver(report).observe(document.documentElement);
  window.addEventListener("load", report);
  document.addEventListener("toggle", report, true);
  report();
})();
