# One image for every OpenTinker service; docker-compose.yml picks the command
# (`python -m opentinker_<name>`). Build: docker build -t opentinker:dev .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch first: the largest layer, and it changes least often. CPU build; GPU hosts
# use an image built FROM a CUDA base with the matching torch wheel instead.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

WORKDIR /opt/opentinker
COPY packages/ packages/
COPY clients/python/ clients/python/
COPY services/ services/
RUN pip install \
        ./packages/api \
        ./packages/env \
        ./packages/runtime \
        ./clients/python \
        ./services/scheduler \
        ./services/trainer \
        ./services/rollout \
        ./services/envhost \
        ./services/coordinator \
        ./services/gateway \
    && useradd --create-home --uid 10001 opentinker \
    && mkdir -p /data/checkpoints && chown opentinker /data/checkpoints

USER opentinker
WORKDIR /home/opentinker
# 50051 scheduler, 50052 trainer, 50053 rollout, 50054 envhost, 50055 coordinator, 8100 gateway (HTTP)
EXPOSE 50051 50052 50053 50054 50055 8100
CMD ["python", "-m", "opentinker.cli.health_probe", "--help"]
