// The new-endpoint form: the kind decides which fields show (LLM settings and TTFT/ITL SLOs for
// an LLM endpoint; the p99 SLO and the PSI guardrail for a tensor one) and the defaults it
// starts with (#kind-defaults: the model's and the LLM service's own, deployments.forms.
// kind_defaults): a field still holding the other kind's default takes the chosen kind's;
// one a person typed in is left alone. Without JavaScript every field stays visible,
// ?kind=llm gives the LLM defaults, and untouched fields take the kind's default at the service.
(function () {
  const kind = document.getElementById("id_kind");
  const defaultsNode = document.getElementById("kind-defaults");
  if (!kind) return;
  const defaults = defaultsNode ? JSON.parse(defaultsNode.textContent) : null;
  let current = kind.value || "tensor";
  const sync = () => {
    const next = kind.value || "tensor";
    document.querySelectorAll("[data-llm-only]").forEach((el) => { el.hidden = next !== "llm"; });
    document.querySelectorAll("[data-tensor-only]").forEach((el) => { el.hidden = next === "llm"; });
    if (defaults && next !== current) {
      for (const [field, value] of Object.entries(defaults[next])) {
        const input = document.getElementById(`id_${field}`);
        if (input && input.tagName !== "SELECT" && String(input.value) === String(defaults[current][field])) input.value = value;
        if (input && input.tagName === "SELECT" && input.value === String(defaults[current][field])) input.value = value;
      }
    }
    current = next;
  };
  kind.addEventListener("change", sync);
  sync();
})();
