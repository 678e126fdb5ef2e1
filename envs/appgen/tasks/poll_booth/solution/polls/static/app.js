const optionsBox = document.getElementById("options");
const error = document.getElementById("error");
const pollsBox = document.getElementById("polls");

function addOption() {
  if (optionsBox.querySelectorAll("input.option").length >= 8) return;
  const input = document.createElement("input");
  input.className = "option";
  input.placeholder = "Option";
  optionsBox.append(input);
}

function resetForm() {
  document.getElementById("question").value = "";
  optionsBox.replaceChildren();
  addOption();
  addOption();
}

function showError(text) {
  error.textContent = text;
  error.hidden = !text;
}

function renderPoll(poll) {
  const box = document.createElement("div");
  box.className = "poll";
  box.dataset.id = poll.id;
  const q = document.createElement("div");
  q.className = "question";
  q.textContent = poll.question;
  box.append(q);
  poll.options.forEach((opt, i) => {
    const choice = document.createElement("div");
    choice.className = "choice";
    const button = document.createElement("button");
    button.className = "vote";
    button.type = "button";
    button.textContent = "Vote";
    button.addEventListener("click", () => vote(poll.id, i));
    const result = document.createElement("span");
    result.className = "result";
    result.textContent = `${opt.text}: ${opt.votes} (${opt.percent}%)`;
    choice.append(button, result);
    box.append(choice);
  });
  return box;
}

async function vote(id, option) {
  const resp = await fetch(`/api/polls/${id}/vote`, {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({option}),
  });
  if (!resp.ok) return showError("Could not vote.");
  load();  // the latest load wins, so answers to overlapping votes cannot leave old counts
}

let shown = 0;
async function load() {
  const mine = ++shown;
  const polls = await (await fetch("/api/polls")).json();
  if (mine !== shown) return;  // a newer load started: its data is newer
  pollsBox.replaceChildren(...polls.map(renderPoll));
}

document.getElementById("add-option").addEventListener("click", addOption);
document.getElementById("new-poll").addEventListener("submit", async (event) => {
  event.preventDefault();
  const question = document.getElementById("question").value.trim();
  const options = [...optionsBox.querySelectorAll("input.option")].map(i => i.value.trim());
  if (!question || question.length > 120) return showError("Enter a question (up to 120 characters).");
  if (options.length < 2 || options.some(o => !o || o.length > 60)) return showError("Fill in at least two options.");
  if (new Set(options.map(o => o.toLowerCase())).size !== options.length) return showError("Options must differ.");
  const resp = await fetch("/api/polls", {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({question, options}),
  });
  const body = await resp.json();
  if (!resp.ok) return showError(body.error || "Could not create the poll.");
  showError("");
  load();  // not pollsBox.prepend: the load-time list, if still on its way, would drop the poll
  resetForm();
});

resetForm();
load();
