// Copy buttons (data-copy="#selector") and confirmation for forms with data-confirm.
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  const text = source.value !== undefined ? source.value : source.textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch (err) {  // no clipboard permission (plain http): select it for Ctrl+C instead
    if (source.select) source.select();
  }
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
});
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
});
