// easel dashboard: the little script it needs besides htmx. Everything works without it but
// the copy buttons and the playground's key being filled in.
document.addEventListener("click", function (e) {
  var b = e.target.closest("[data-copy]");
  if (!b) return;
  var el = document.getElementById(b.getAttribute("data-copy"));
  if (!el || !navigator.clipboard) return;
  navigator.clipboard.writeText(el.textContent.trim()).then(function () {
    b.textContent = "Copied";
  });
});
// A key just created is kept for this tab only (sessionStorage), for the playground's form.
document.addEventListener("DOMContentLoaded", function () {
  var created = document.querySelector("[data-testid=new-key]");
  if (created) sessionStorage.setItem("easel-key", created.textContent.trim());
  var field = document.getElementById("pg-key");
  var kept = sessionStorage.getItem("easel-key");
  if (field && kept && !field.value) field.value = kept;
});
