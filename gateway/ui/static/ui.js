// retrysafe operator page: refreshes the live parts. Without JavaScript the
// server-rendered tables work as they are (reload to update).
//
// Each element with data-refresh="URL" is replaced, every data-interval
// milliseconds, by the HTML fragment the server renders at URL (the server
// escapes everything in it; nothing here builds HTML from data). Refreshing
// pauses while the tab is hidden or an element inside has the focus.
"use strict";
(function () {
  document.documentElement.classList.add("js");
  function start(el) {
    var url = el.getAttribute("data-refresh");
    var every = parseInt(el.getAttribute("data-interval"), 10) || 2000;
    var busy = false;
    function tick() {
      if (busy || document.hidden || el.contains(document.activeElement)) return;
      busy = true;
      fetch(url, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (!r.ok) throw new Error(r.status + " " + r.statusText);
          return r.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          el.removeAttribute("data-stale");
        })
        .catch(function () { el.setAttribute("data-stale", "true"); })
        .then(function () { busy = false; });
    }
    setInterval(tick, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(start);
  });
})();
