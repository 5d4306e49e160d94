// easel's region editor (Vary (Region)): paint, or mark rectangles, over an image; the marks are
// kept as a list (so Undo takes the last away) in the image's own pixels, and on Submit region
// drawn white on black into a PNG of the image's size: the inpaint's mask.
(function () {
  var ed = document.querySelector("[data-region-editor]");
  if (!ed) return;
  var W = +ed.getAttribute("data-width"), H = +ed.getAttribute("data-height");
  var form = ed.closest("form");
  var canvas = ed.querySelector("canvas");
  var ctx = canvas.getContext("2d");
  var cursorBox = ed.querySelector(".cursor");
  var brush = form.querySelector("#r-brush");
  var rectButton = form.querySelector("[data-rect]");
  var marks = form.querySelector("[data-marks]");
  var ops = [], current = null, rectMode = false;
  // The keyboard's rectangle, in image pixels.
  var cur = { x: Math.round(W / 4), y: Math.round(H / 4), w: Math.round(W / 2), h: Math.round(H / 2) };

  function paint(c, op) {
    if (op.rect) {
      var x = Math.min(op.x, op.x + op.w), y = Math.min(op.y, op.y + op.h);
      c.fillRect(x, y, Math.abs(op.w), Math.abs(op.h));
      return;
    }
    c.lineWidth = op.size;
    c.lineCap = "round";
    c.lineJoin = "round";
    c.beginPath();
    c.moveTo(op.points[0].x, op.points[0].y);
    for (var i = 1; i < op.points.length; i++) c.lineTo(op.points[i].x, op.points[i].y);
    // A single tap is a dot.
    if (op.points.length === 1) c.lineTo(op.points[0].x + 0.1, op.points[0].y);
    c.stroke();
  }

  function redraw() {
    ctx.clearRect(0, 0, W, H);
    ctx.fillStyle = ctx.strokeStyle = "#ff3b30";
    ops.forEach(function (op) { paint(ctx, op); });
    if (current) paint(ctx, current);
    marks.textContent = ops.length
      ? ops.length + (ops.length === 1 ? " mark" : " marks") + " to redraw."
      : "Nothing marked yet.";
  }

  function at(e) {
    var r = canvas.getBoundingClientRect();
    return {
      x: Math.max(0, Math.min(W, ((e.clientX - r.left) * W) / r.width)),
      y: Math.max(0, Math.min(H, ((e.clientY - r.top) * H) / r.height)),
    };
  }

  function sizeInPixels() {
    // The brush is sized in screen pixels: the same on a phone as on a desktop.
    var r = canvas.getBoundingClientRect();
    return (+brush.value * W) / (r.width || W);
  }

  canvas.addEventListener("pointerdown", function (e) {
    if (e.button !== 0 && e.pointerType === "mouse") return;
    e.preventDefault();
    canvas.setPointerCapture(e.pointerId);
    var p = at(e);
    current = rectMode
      ? { rect: true, x: p.x, y: p.y, w: 0, h: 0 }
      : { size: sizeInPixels(), points: [p] };
    redraw();
  });
  canvas.addEventListener("pointermove", function (e) {
    if (!current) return;
    var p = at(e);
    if (current.rect) {
      current.w = p.x - current.x;
      current.h = p.y - current.y;
    } else {
      current.points.push(p);
    }
    redraw();
  });
  function finish() {
    if (!current) return;
    if (!current.rect || (Math.abs(current.w) >= 1 && Math.abs(current.h) >= 1)) ops.push(current);
    current = null;
    redraw();
  }
  canvas.addEventListener("pointerup", finish);
  canvas.addEventListener("pointercancel", finish);

  rectButton.addEventListener("click", function () {
    rectMode = !rectMode;
    rectButton.setAttribute("aria-pressed", rectMode ? "true" : "false");
  });
  form.querySelector("[data-undo]").addEventListener("click", function () {
    ops.pop();
    redraw();
  });
  form.querySelector("[data-clear]").addEventListener("click", function () {
    ops = [];
    redraw();
  });

  function showCursor() {
    cursorBox.hidden = false;
    cursorBox.style.left = (100 * cur.x) / W + "%";
    cursorBox.style.top = (100 * cur.y) / H + "%";
    cursorBox.style.width = (100 * cur.w) / W + "%";
    cursorBox.style.height = (100 * cur.h) / H + "%";
  }
  ed.addEventListener("focus", showCursor);
  ed.addEventListener("blur", function () { cursorBox.hidden = true; });
  ed.addEventListener("keydown", function (e) {
    var step = Math.max(1, Math.round(Math.min(W, H) / 32));
    var d = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] }[e.key];
    if (d) {
      if (e.shiftKey) {
        cur.w = Math.max(step, Math.min(W - cur.x, cur.w + d[0] * step));
        cur.h = Math.max(step, Math.min(H - cur.y, cur.h + d[1] * step));
      } else {
        cur.x = Math.max(0, Math.min(W - cur.w, cur.x + d[0] * step));
        cur.y = Math.max(0, Math.min(H - cur.h, cur.y + d[1] * step));
      }
    } else if (e.key === "Enter" || e.key === " ") {
      ops.push({ rect: true, x: cur.x, y: cur.y, w: cur.w, h: cur.h });
      redraw();
    } else if (e.key === "Backspace" || e.key === "Delete" || (e.key === "z" && (e.ctrlKey || e.metaKey))) {
      ops.pop();
      redraw();
    } else {
      return;
    }
    e.preventDefault();
    showCursor();
  });

  form.addEventListener("submit", function (e) {
    if (!ops.length) {
      e.preventDefault();
      marks.textContent = "Paint the region to redraw first.";
      ed.focus();
      return;
    }
    var mask = document.createElement("canvas");
    mask.width = W;
    mask.height = H;
    var m = mask.getContext("2d");
    m.fillStyle = "#000";
    m.fillRect(0, 0, W, H);
    m.fillStyle = m.strokeStyle = "#fff";
    ops.forEach(function (op) { paint(m, op); });
    form.querySelector("[name=mask]").value = mask.toDataURL("image/png");
  });
  redraw();
})();
