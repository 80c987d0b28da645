// The endpoint form: LLM-only SLOs (time to first token, inter-token latency) are shown only
// when the kind is LLM (without JavaScript every field stays visible; the service decides).
(function () {
  const kind = document.getElementById("id_kind");
  if (!kind) return;
  const llmOnly = document.querySelectorAll("[data-llm-only]");
  const sync = () => llmOnly.forEach((el) => { el.hidden = kind.value !== "llm"; });
  kind.addEventListener("change", sync);
  sync();
})();
