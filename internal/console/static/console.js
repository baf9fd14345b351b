// A page that may still change (a request's story while it runs) reloads
// itself every second.
if (document.body.dataset.refresh) {
  setTimeout(function () { location.reload(); }, 1000);
}

// The overview's live counts: one server-sent event per second carries
// every number; each element with data-field="a.b" shows that path.
(function () {
  if (document.body.dataset.page !== "overview" || !window.EventSource) return;
  var live = document.getElementById("live");
  var source = new EventSource("/events");
  source.addEventListener("overview", function (e) {
    var o = JSON.parse(e.data);
    document.querySelectorAll("[data-field]").forEach(function (el) {
      var v = el.dataset.field.split(".").reduce(function (x, k) { return x == null ? x : x[k]; }, o);
      if (v == null) return;
      el.textContent = typeof v === "number" && el.dataset.field === "rides_per_second" ? v.toFixed(1) : String(v);
    });
    // UTC, as every time the server renders: not the browser's zone.
    live.textContent = "live · " + new Date(o.at).toISOString().slice(11, 19) + " UTC";
    live.className = "live";
  });
  source.onerror = function () { live.textContent = "reconnecting…"; live.className = "muted"; };
})();
