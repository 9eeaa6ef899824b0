// Draw-a-digit: a canvas, light ink on black like MNIST, sent to the server as a PNG.
(function () {
  var form = document.querySelector("[data-digits]");
  if (!form) return;
  var canvas = form.querySelector("canvas");
  var output = document.querySelector(".digit-output");
  var context = canvas.getContext("2d");
  canvas.hidden = false;
  form.querySelector(".digit-buttons").hidden = false;

  function clear() {
    context.fillStyle = "#000";
    context.fillRect(0, 0, canvas.width, canvas.height);
    output.innerHTML = "";
  }
  clear();
  context.lineCap = "round";
  context.lineJoin = "round";
  context.lineWidth = 18;
  context.strokeStyle = "#fff";

  var drawing = false;
  function point(event) {
    var box = canvas.getBoundingClientRect();
    return [(event.clientX - box.left) * canvas.width / box.width, (event.clientY - box.top) * canvas.height / box.height];
  }
  canvas.addEventListener("pointerdown", function (event) {
    drawing = true;
    canvas.setPointerCapture(event.pointerId);
    var p = point(event);
    context.beginPath();
    context.moveTo(p[0], p[1]);
    context.lineTo(p[0] + 0.1, p[1]);
    context.stroke();
  });
  canvas.addEventListener("pointermove", function (event) {
    if (!drawing) return;
    var p = point(event);
    context.lineTo(p[0], p[1]);
    context.stroke();
  });
  ["pointerup", "pointercancel"].forEach(function (name) {
    canvas.addEventListener(name, function () { drawing = false; });
  });
  form.querySelector("[data-clear]").addEventListener("click", clear);

  function send(blob, name) {
    var data = new FormData();
    data.append("csrfmiddlewaretoken", form.elements.csrfmiddlewaretoken.value);
    data.append("image", blob, name);
    output.innerHTML = '<p class="running"><span class="spinner" aria-hidden="true"></span> Classifying on the server…</p>';
    fetch(form.action || location.pathname, { method: "POST", body: data, headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.json(); })
      .then(function (body) { output.innerHTML = body.html; })
      .catch(function () { output.innerHTML = '<p class="problem">The server could not be reached. Try again.</p>'; });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var file = form.elements.image.files[0];
    if (event.submitter && event.submitter.classList.contains("upload-submit") && file) {
      send(file, file.name);
      return;
    }
    canvas.toBlob(function (blob) { send(blob, "drawing.png"); }, "image/png");
  });
})();
