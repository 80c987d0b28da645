// Small page behaviours, bound by data attributes instead of inline handlers (the
// Content-Security-Policy runs no inline script: kernel/csp.py).
//   data-submit-on-change       a select that submits its form when changed (a filter)
//   data-select-on-focus        a read-only field whose text is selected on focus (a new key)
//   data-copy-from="ID"         a button that copies the value of #ID and says "Copied"
(function () {
  document.addEventListener("change", (event) => {
    const select = event.target.closest("[data-submit-on-change]");
    if (select && select.form) select.form.submit();
  });
  document.addEventListener("focusin", (event) => {
    if (event.target.matches("[data-select-on-focus]")) event.target.select();
  });
  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-copy-from]");
    if (!button) return;
    const source = document.getElementById(button.dataset.copyFrom);
    if (source && navigator.clipboard) {
      navigator.clipboard.writeText(source.value).then(() => { button.textContent = "Copied"; });
    }
  });
})();
