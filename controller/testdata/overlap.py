# Records its start and end times, for measuring concurrency.
import os, time

path = os.path.join(os.environ["SPAN_DIR"], os.environ["AGL_ATTEMPT_ID"])
start = time.time()
time.sleep(0.3)
with open(path, "w") as f:
    f.write(f"{start} {time.time()}\n")
with open(os.environ["AGL_REWARD_FILE"], "w") as f:
    f.write('{"value": 0.5}')
