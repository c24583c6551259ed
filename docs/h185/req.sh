# usage: req.sh PORT MODE [stream]
S=${3:-false}
curl -s -i -m 10 127.0.0.1:$1/v1/chat/completions -H 'content-type: application/json' -d "{\"model\": \"evil\", \"stream\": $S, \"messages\": [{\"role\": \"user\", \"content\": \"$2\"}]}"
