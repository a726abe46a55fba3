#!/bin/bash
mkdir -p bin
cat > bin/greet <<'SCRIPT'
#!/bin/bash
echo "Hello, ${1:-stranger}!"
SCRIPT
chmod +x bin/greet
