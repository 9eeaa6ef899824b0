// Kernelbin's embed loader, for the blogger's page:
//   <a class="kernelbin-embed" href="https://…/s/<slug>/embed/?from=7&to=10">…</a>
//   <script async src="https://…/static/js/embed.js"></script>
// Each such link to one of our embed URLs (on the origin this script came from) becomes
// an iframe of that embed, as wide as the column (up to 760 px) and as tall as its
// content, within MAX_HEIGHT: the embed reports its height (embed-frame.js), and only
// messages from one of our frames' own window and origin are believed. Any other link
// with the class (javascript:, another site) stays a link, and another site's iframe with
// the class is left alone. Iframes of ours already on the page (oEmbed's html) are fitted
// the same way.
(function () {
  if (window.kernelbinEmbed) { window.kernelbinEmbed.scan(); return; }

  var MAX_WIDTH = "760px";
  var MIN_HEIGHT = 60;
  var MAX_HEIGHT = 8000; // taller content scrolls inside the frame
  var EMBED_PATH = /^\/(s\/[-\w]+\/(turns\/\d+\/replay\/)?|f\/[-\w]+\/)embed\/$/;
  var script = document.currentScript;
  var site = null;
  try { site = new URL(script.src).origin; } catch (e) { /* no script URL: embed nothing */ }
  var frames = [];

  // The URL if it is one of our embeds (http or https, our origin, an embed path).
  function embedUrl(href) {
    var url;
    try { url = new URL(href, location.href); } catch (e) { return null; }
    if (url.protocol !== "https:" && url.protocol !== "http:") return null;
    if (site === null || url.origin !== site || !EMBED_PATH.test(url.pathname)) return null;
    return url;
  }

  function fit(frame) {
    frame.style.width = "100%";
    frame.style.maxWidth = MAX_WIDTH;
    frame.style.border = "0";
    frame.style.display = "block";
    frame.setAttribute("scrolling", "no");
    frames.push(frame);
  }

  function replace(link) {
    var url = embedUrl(link.getAttribute("href"));
    if (url === null) return;
    var frame = document.createElement("iframe");
    frame.src = url.href;
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
      if (frames.indexOf(frame) < 0 && embedUrl(frame.getAttribute("src"))) fit(frame);
    });
  }

  window.addEventListener("message", function (event) {
    var data = event.data;
    if (!data || data.type !== "kernelbin:embed-height" || typeof data.height !== "number") return;
    if (event.origin !== site || !isFinite(data.height)) return;
    frames.forEach(function (frame) {
      if (frame.contentWindow !== event.source) return;
      var height = Math.max(MIN_HEIGHT, Math.min(Math.ceil(data.height), MAX_HEIGHT));
      frame.style.height = height + "px";
      frame.setAttribute("scrolling", data.height > MAX_HEIGHT ? "auto" : "no");
      frame.removeAttribute("height");
    });
  });

  window.kernelbinEmbed = { scan: scan };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scan);
  scan();
})();
