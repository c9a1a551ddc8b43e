// jobchain dashboard: the only script of the pages (no inline script: the CSP forbids it).
// 1. Forms marked data-confirm ask before they post (cancel, delete).
// 2. Pages marked data-refresh reload themselves every N seconds while visible and idle.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  var seconds = parseInt(document.body && document.body.getAttribute("data-refresh"), 10);
  if (seconds > 0) {
    window.setInterval(function () {
      var busy = document.activeElement && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(document.activeElement.tagName);
      var reading = document.querySelector("details[open]") || String(window.getSelection()).length > 0;
      if (document.visibilityState === "visible" && !busy && !reading) {
        window.location.reload();
      }
    }, seconds * 1000);
  }
})();
