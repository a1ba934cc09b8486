"""What the stage's test scripts share: `liveaudio` started with the stage (its address read from standard error, its
output kept, stopped by its PID), the command line after `--`, and headless Chromium."""
import os
import re
import signal
import subprocess
import threading
import time


class Liveaudio:
    """`command` running in `cwd`, its standard output and error kept line by line."""

    def __init__(self, command, cwd):
        self.proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stdout, self.stderr = [], []
        self._url = None
        self._found = threading.Event()
        threading.Thread(target=self._read_err, daemon=True).start()
        threading.Thread(target=self._read_out, daemon=True).start()

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))
            m = re.search(r"the stage is at (https?://\S+)", line)
            if m:
                self._url = m.group(1)
                self._found.set()

    def _read_out(self):
        for line in self.proc.stdout:
            self.stdout.append(line.rstrip("\n"))

    def url(self, timeout=60):
        """The stage's address as printed; an error if none comes within `timeout` seconds."""
        if not self._found.wait(timeout):
            raise RuntimeError("liveaudio printed no stage address: " + " | ".join(self.stderr[-5:]))
        return self._url

    def stop(self):
        """SIGINT if still running (its files completed), SIGKILL after 20 s; then the output is in."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        time.sleep(0.2)

    def report(self, results):
        results["exitStatus"] = self.proc.returncode
        results["stdout"] = self.stdout
        results["stderr"] = self.stderr


def wait(what, check, timeout=30, step=0.05):
    """`check()`'s first true value, tried every `step` seconds; an error naming `what` after `timeout`."""
    end = time.time() + timeout
    while time.time() < end:
        value = check()
        if value:
            return value
        time.sleep(step)
    raise RuntimeError("timed out waiting for " + what)


def command(args):
    """The command after `--` (argparse's REMAINDER keeps the separator)."""
    return args.command[1:] if args.command and args.command[0] == "--" else args.command


def chromium(extra=(), logs=("browser",)):
    """Headless Chromium (Debian's) through its chromedriver, with the named logs kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    o = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", *extra]:
        o.add_argument(a)
    o.binary_location = "/usr/bin/chromium"
    o.set_capability("goog:loggingPrefs", {name: "ALL" for name in logs})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


class Evening(Liveaudio):
    """The evening's process: the stage's address and the phones' join address, read from standard error."""

    def join_url(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            for line in self.stderr:
                m = re.search(r"phones join at (https?://\S+)", line)
                if m:
                    return m.group(1)
            time.sleep(0.05)
        raise RuntimeError("liveaudio printed no join address: " + " | ".join(self.stderr[-5:]))
