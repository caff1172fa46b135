// The report's only script (pinned by its hash in the page's Content-Security-Policy).
// It reads the embedded data with JSON.parse and writes only through textContent, value,
// hidden and open: nothing it handles is ever parsed as markup.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var calls = Array.prototype.slice.call(document.querySelectorAll("details.call"));
  var filter = document.getElementById("call-filter");
  var shown = document.getElementById("calls-shown");

  function setAll(open) {
    calls.forEach(function (call) {
      if (!call.hidden) {
        call.open = open;
      }
    });
  }

  function applyFilter() {
    var wanted = filter.value;
    var count = 0;
    calls.forEach(function (call) {
      var hide = wanted !== "" && call.getAttribute("data-state") !== wanted;
      call.hidden = hide;
      if (!hide) {
        count += 1;
      }
    });
    shown.textContent = count + " of " + calls.length + " call(s) shown";
  }

  function openTarget() {
    var id = window.location.hash.slice(1);
    try {
      id = decodeURIComponent(id);
    } catch (malformed) {
      return;
    }
    var target = id ? document.getElementById(id) : null;
    if (target && target.tagName === "DETAILS") {
      target.hidden = false;
      target.open = true;
    }
  }

  if (filter) {
    var states = [];
    data.calls.forEach(function (call) {
      if (states.indexOf(call.state) < 0) {
        states.push(call.state);
      }
    });
    states.sort().forEach(function (state) {
      var option = document.createElement("option");
      option.value = state;
      option.textContent = state;
      filter.appendChild(option);
    });
    filter.addEventListener("change", applyFilter);
    document.getElementById("expand-all").addEventListener("click", function () {
      setAll(true);
    });
    document.getElementById("collapse-all").addEventListener("click", function () {
      setAll(false);
    });
    applyFilter();
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
  document.documentElement.setAttribute("data-ready", "true");
})();
