// Kernelbin's embed loader, for the blogger's page:
//   <a class="kernelbin-embed" href="https://…/s/<slug>/embed/?from=7&to=10">…</a>
//   <script async src="https://…/static/js/embed.js"></script>
// Each such link becomes an iframe of that embed, as wide as the column (up to 760 px)
// and as tall as its content: the embed reports its height (embed-frame.js) and only
// messages from the iframe's own window and origin are believed. Iframes already on the
// page with class "kernelbin-embed" (oEmbed's html) are fitted the same way.
(function () {
  if (window.kernelbinEmbed) { window.kernelbinEmbed.scan(); return; }

  var MAX_WIDTH = "760px";
  var frames = [];

  function fit(frame) {
    frame.style.width = "100%";
    frame.style.maxWidth = MAX_WIDTH;
    frame.style.border = "0";
    frame.style.display = "block";
    frame.setAttribute("scrolling", "no");
    var origin;
    try { origin = new URL(frame.src, location.href).origin; } catch (e) { return; }
    frames.push({ frame: frame, origin: origin });
  }

  function replace(link) {
    var frame = document.createElement("iframe");
    frame.src = link.href;
    frame.title = (link.textContent || "Kernelbin embed").trim() + " (Kernelbin)";
    frame.height = "400";
    frame.setAttribute("loading", "lazy");
    frame.className = "kernelbin-embed";
    link.parentNode.replaceChild(frame, link);
    fit(frame);
  }

  function scan() {
    document.querySelectorAll("a.kernelbin-embed[href]").forEach(replace);
    document.querySelectorAll("iframe.kernelbin-embed").forEach(function (frame) {
      if (!frames.some(function (known) { return known.frame === frame; })) fit(frame);
    });
  }

  window.addEventListener("message", function (event) {
    var data = event.data;
    if (!data || data.type !== "kernelbin:embed-height" || typeof data.height !== "number") return;
    frames.forEach(function (known) {
      if (known.frame.contentWindow !== event.source || known.origin !== event.origin) return;
      known.frame.style.height = Math.max(60, Math.min(data.height, 20000)) + "px";
      known.frame.removeAttribute("height");
    });
  });

  window.kernelbinEmbed = { scan: scan };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scan);
  scan();
})();
