python3 -m pip install --no-build-isolation --no-deps . -q 2>&1 | tail -3
cd /tmp
echo "--- import vramscope then torch"; PYTHONFAULTHANDLER=1 python3 -c "import vramscope; import torch; print('ok')" 2>&1 | head -12
echo "--- env autostart"; VRAMSCOPE_RUN='{"output": "/tmp/a.vscope", "launcher": 1}' PYTHONFAULTHANDLER=1 python3 -c "import torch; print('ok')" 2>&1 | head -30
