"""The chat page in a real browser: headless Chromium driven by Selenium.

Run by tests/it/ui.rs against a `shepherd --cliserver` whose upstream is a
fake OpenAI server that replays, in order: a `write` tool call (which needs
approval), an answer with thinking, markup and usage, an endless drip of
text (to cancel), and the answer to a message with an attached image. With `api`, against `shepherd --server` instead, whose
upstream replays the answer and the drip. Usage:

    chat_page.py [cli|api] BASE_URL TOKEN OUT_DIR

Leaves screenshots in OUT_DIR (chat.png, observer.png, attach.png, api.png; failure.png
when it fails). Every wait is a WebDriverWait on a condition, never a sleep.
"""

import os
import struct
import sys
import tempfile
import zlib

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

MARKUP = "<img src=x onerror=\"document.title='pwned'\">"
WAIT_S = 30


def make_driver(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("SHEPHERD_CHROMIUM", "/usr/bin/chromium")
    for flag in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows",
        "--window-size=1366,768",
        "--user-data-dir=" + profile,
    ]:
        options.add_argument(flag)
    service = Service(os.environ.get("SHEPHERD_CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_window_size(1366, 768)
    return driver


def wait(driver, condition, what):
    return WebDriverWait(driver, WAIT_S).until(condition, message="waiting for " + what)


def text_of(driver, css):
    return "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, css))


def wait_text(driver, css, needle):
    wait(driver, lambda d: needle in text_of(d, css), f"{needle!r} in {css}")


def enabled(driver, element_id):
    return driver.find_element(By.ID, element_id).is_enabled()


def log(message):
    print("chat_page: " + message, flush=True)


def sign_in(driver, base, token, ready="live"):
    """Loads the page and enters the token in its form; waits until it is
    `ready` (the cliserver's /updates stream is live)."""
    driver.get(base + "/")
    form = driver.find_element(By.ID, "token-form")
    wait(driver, lambda d: form.is_displayed(), "the token form")
    driver.find_element(By.ID, "token").send_keys(token, Keys.ENTER)
    wait(driver, lambda d: d.find_element(By.ID, "status").text == ready, "the page to be " + ready)
    assert not form.is_displayed()
    assert enabled(driver, "prompt") and enabled(driver, "send")


def send(driver, prompt):
    driver.find_element(By.ID, "prompt").send_keys(prompt, Keys.ENTER)


def refused_token_asks_again(driver, base):
    driver.get(base + "/")
    wait(driver, lambda d: d.find_element(By.ID, "token-form").is_displayed(), "the token form")
    assert not enabled(driver, "prompt"), "no prompt before the token"
    driver.find_element(By.ID, "token").send_keys("not-the-token", Keys.ENTER)
    wait_text(driver, "#status", "refused")
    assert driver.find_element(By.ID, "token-form").is_displayed()


def tool_call_with_approval(driver):
    send(driver, "Write the file, please.")
    wait_text(driver, ".msg.user .text", "Write the file, please.")
    wait_text(driver, ".tool-call", "write")
    allow = wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, ".approval button[data-decision=allow]"),
        "the approval buttons",
    )
    labels = [b.text for b in driver.find_elements(By.CSS_SELECTOR, ".approval button")]
    assert labels == ["Allow", "Deny", "Always"], labels
    assert enabled(driver, "cancel"), "a running request can be cancelled"
    allow.click()
    wait_text(driver, ".approval .answer", "allow")
    wait_text(driver, ".tool-result", "write")
    log("approval answered, the tool ran")


def answer_with_thinking_markup_and_stats(driver):
    wait_text(driver, ".msg.assistant .text", "Done: ")
    wait_text(driver, ".msg.assistant .text", MARKUP)
    wait_text(driver, ".thinking", "the user wants a file")
    wait_text(driver, ".stats", "prompt tokens")
    stats = text_of(driver, ".stats")
    assert "21 prompt tokens · 7 generated · 140.0 tok/s" in stats, stats
    assert not driver.find_elements(By.CSS_SELECTOR, "#log img"), "model text became markup"
    assert driver.title == "shepherd", driver.title
    wait(driver, lambda d: not enabled(d, "cancel"), "the request to finish")
    log("streamed answer, thinking and token counts shown; markup stayed text")


def observer_saw_it(driver, out_dir):
    wait_text(driver, ".tool-result", "write")
    wait_text(driver, ".msg.assistant .text", MARKUP)
    wait_text(driver, ".approval .answer", "ran")
    driver.save_screenshot(os.path.join(out_dir, "observer.png"))
    log("the second tab followed /updates live")


def cancel_a_long_answer(driver):
    send(driver, "Tell me a very long story.")
    wait(driver, lambda d: text_of(d, ".msg.assistant .text").count("story ") >= 5, "a streaming answer")
    wait(driver, lambda d: enabled(d, "cancel"), "the Cancel button")
    driver.find_element(By.ID, "cancel").click()
    wait_text(driver, ".finish", "(cancelled)")
    wait(driver, lambda d: not enabled(d, "cancel"), "Cancel to be disabled again")
    log("a long answer was cancelled")


def reload_keeps_token_and_session(driver):
    driver.refresh()
    wait(driver, lambda d: d.find_element(By.ID, "status").text == "live", "live after a reload")
    assert not driver.find_element(By.ID, "token-form").is_displayed(), "token kept in sessionStorage"
    wait_text(driver, ".msg.assistant .text", "Done: ")
    log("a reload keeps the token and shows the session")


def write_png(path, width=2, height=2):
    """A real RGB PNG, written with zlib alone."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + bytes([200, 40, 40]) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def attach_an_image(driver, out_dir):
    path = os.path.join(out_dir, "attached.png")
    write_png(path)
    driver.find_element(By.ID, "image-file").send_keys(path)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#attachments .thumb img"), "the thumbnail")
    assert driver.find_element(By.ID, "attachments").is_displayed()
    driver.save_screenshot(os.path.join(out_dir, "attach.png"))
    send(driver, "What is in the picture?")
    wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, "#attachments .thumb"), "the attachment to go")
    wait_text(driver, ".msg.assistant .text", "I see a small picture.")
    wait(driver, lambda d: not enabled(d, "cancel"), "the request to finish")
    driver.refresh()
    wait(driver, lambda d: d.find_element(By.ID, "status").text == "live", "live after a reload")
    wait_text(driver, ".msg.user .image", "[image: image/png 2x2]")
    log("an attached image went with the message into the session")


def api_server(driver, base, token, out_dir):
    """`--server`: the page keeps the conversation and streams chat completions."""
    sign_in(driver, base, token, ready="ready")
    assert driver.find_element(By.ID, "mode").text == "API server"
    send(driver, "Hello there.")
    answer_with_thinking_markup_and_stats(driver)
    cancel_a_long_answer(driver)
    driver.save_screenshot(os.path.join(out_dir, "api.png"))


def cliserver(driver, base, token, out_dir):
    refused_token_asks_again(driver, base)
    sign_in(driver, base, token)
    main_tab = driver.current_window_handle
    driver.switch_to.new_window("tab")
    sign_in(driver, base, token)
    observer_tab = driver.current_window_handle
    driver.switch_to.window(main_tab)
    tool_call_with_approval(driver)
    answer_with_thinking_markup_and_stats(driver)
    driver.switch_to.window(observer_tab)
    observer_saw_it(driver, out_dir)
    driver.switch_to.window(main_tab)
    cancel_a_long_answer(driver)
    driver.save_screenshot(os.path.join(out_dir, "chat.png"))
    reload_keeps_token_and_session(driver)
    attach_an_image(driver, out_dir)


def main():
    mode, base, token, out_dir = sys.argv[1:5]
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shepherd-chromium-") as profile:
        driver = make_driver(profile)
        try:
            {"cli": cliserver, "api": api_server}[mode](driver, base, token, out_dir)
        except Exception:
            driver.save_screenshot(os.path.join(out_dir, mode + "-failure.png"))
            print(driver.find_element(By.TAG_NAME, "body").text, file=sys.stderr)
            raise
        finally:
            driver.quit()
    log("passed; screenshots in " + out_dir)


if __name__ == "__main__":
    main()
