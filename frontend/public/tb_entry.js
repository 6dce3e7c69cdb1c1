// TensorBoard loads this module in its plugin frame and calls render(): open our page there.
export function render() {
  window.location.replace(new URL("./index.html", import.meta.url).href);
}
