// The dashboard's action endpoints: POST a JSON body with the page's CSRF token (the csrf-token meta
// tag operators' pages carry); resolves to {status, answer} (answer: the JSON body, or a detail).
window.postAction = async (url, body) => {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  let answer;
  try {
    answer = await response.json();
  } catch (err) {
    answer = { detail: `HTTP ${response.status} without a JSON body` };
  }
  return { status: response.status, answer };
};
