const $ = (id) => document.getElementById(id);

async function post(path, body) {
  const resp = await fetch(path, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  return [resp.status, await resp.json()];
}

$("subscribe-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const [status, body] = await post("/api/subscribe", {email: $("email").value});
  if (status === 200 || status === 201) $("status").textContent = "Check your inbox to confirm.";
  else if (status === 409) $("status").textContent = "You are already subscribed.";
  else $("status").textContent = body.error || "Something went wrong.";
});

$("send-issue").addEventListener("click", async () => {
  const [status, body] = await post("/api/issues", {subject: $("issue-subject").value, text: $("issue-text").value});
  $("send-result").textContent = status === 200 ? `Sent to ${body.sent} subscribers.` : (body.error || "Failed.");
});
